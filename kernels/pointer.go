package kernels

import "unsafe"

// uintptrOf returns the address of p for the driver. The caller keeps the
// memory pinned (runtime.Pinner) and alive while the driver may use it.
func uintptrOf(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }
