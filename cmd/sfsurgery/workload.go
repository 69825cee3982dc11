package main

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/speed"
)

// parseWorkload reads the flags bench and plan share: the shapes of the
// checkpoint argument or of --shapes (stacked with --fuse), the token
// counts of --m and the element type of --dtype.
func parseWorkload(args []string, shapesFlag string, fuse bool, msFlag, dtypeFlag string) ([]speed.Shape, []int, checkpoint.DType, error) {
	fusion := speed.Separate
	if fuse {
		fusion = speed.Fused
	}
	shapes, err := benchShapes(args, shapesFlag, fusion)
	if err != nil {
		return nil, nil, "", err
	}
	ms, err := speed.ParseMs(msFlag)
	if err != nil {
		return nil, nil, "", fmt.Errorf("--m: %w", err)
	}
	dt, err := speed.ParseDType(dtypeFlag)
	if err != nil {
		return nil, nil, "", fmt.Errorf("--dtype: %w", err)
	}
	return shapes, ms, dt, nil
}
