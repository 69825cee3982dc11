// Package launchplan chooses the launches of sfsurgery's decode kernels,
// the 2:4 sparse products of up to [MaxTokens] tokens (y[m][n] = x[m][k] ·
// Wᵀ with W in PyTorch's CUTLASS layout), and describes each launch as a
// plain record that any engine holding the PTX can execute. It has no GPU
// dependency: it works from a device's [Limits] alone.
//
// [Choose] picks one [Plan] for a token count m and an n × k weight: the
// kernel's form (mma.sp, the sm_90a warpgroup form or the hybrid), its
// stage size, warps, slices of k, window of activations, CTA rows, token
// groups, clusters and split-K sum, by a cost model fitted to an H100
// sweep and rules for what the model does not rank (docs/kernels.md §3).
// [Candidates] lists the first [MaxCandidates] plans in the same order,
// for an engine to time on its own GPU; [Candidate] returns one of them.
// [Options] force parts of a plan.
//
// [Plan.Launch] turns a plan into a [Launch]: the PTX module and entry
// point, grid, block, cluster, dynamic shared memory, cooperative flag,
// split-K workspace, the ordered kernel parameters and the launch to fall
// back on where the driver refuses a cooperative launch or the clusters.
// Package kernels launches every decode product from such a record.
//
// The planner's choices are held by TestPlanAgainstBench (every candidate
// `sfsurgery bench` timed on an H100 and an H200, testdata/bench-candidates-*),
// TestModelReplay and TestModelReplayWarpgroup (the sweeps in testdata),
// TestGroupCandidates, TestHybridPlan and TestChoose.
package launchplan
