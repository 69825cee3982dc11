// Package llama defines the tensor names and shapes of LLaMA-family
// checkpoints in one place: the projection weights of a decoder layer
// and the patterns that find them (attention q, k, v, o and MLP gate, up,
// down, with MoE experts and fused projections), the stacks a serving
// engine multiplies (qkv, gate_up), and the shapes of named models
// (tinyllama, llama3-8b, llama3-70b).
//
// Package surgery takes its default targets from here, speed its model
// shapes and op names, synth the tensors it writes.
package llama
