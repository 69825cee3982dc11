// Package cuda binds the CUDA driver API (libcuda.so.1) for Go without
// cgo: [Load] opens the library at run time through
// github.com/ebitengine/purego, so a binary built with CGO_ENABLED=0 runs
// on machines with and without a GPU.
//
// The binding is thin and follows the C API: a [Driver] holds the entry
// points, handles are the driver's own values ([Device], [Context],
// [Module], [Function], [Stream], [Event], [Graph], [GraphExec],
// [DevicePtr]) and every method is one driver call, or a few for one
// purpose, whose failure is an [*Error] naming the call. CUDA makes a
// context current per OS thread: callers lock their goroutine to its
// thread (runtime.LockOSThread) and make their context current
// ([Driver.CtxSetCurrent]) before the calls that need one, and serialise
// the calls they make on one context.
//
// The enum values the binding passes are typed and named in enums.go;
// tools/abi/cuabi.c checks them and the launch structures against cuda.h.
package cuda
