package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/internal/dynlib"
)

// Module is a CUmodule: code loaded into the current context.
type Module uintptr

// Function is a CUfunction: a kernel of a Module.
type Function uintptr

// jitLogBytes is the size of each JIT log buffer.
const jitLogBytes = 1 << 14

// ModuleLoadData JIT-compiles a NUL-terminated PTX image into a module of
// the current context (cuModuleLoadDataEx). On failure the *Error carries
// the driver's result, and the error adds the JIT compiler's log when it
// wrote one.
func (d *Driver) ModuleLoadData(image []byte) (Module, error) {
	errLog := make([]byte, jitLogBytes)
	infoLog := make([]byte, jitLogBytes)
	var pin runtime.Pinner
	pin.Pin(&errLog[0])
	pin.Pin(&infoLog[0])
	defer pin.Unpin()
	opts := []int32{int32(jitErrorLogBuffer), int32(jitErrorLogBufferSize), int32(jitInfoLogBuffer), int32(jitInfoLogBufferSize)}
	vals := []uintptr{
		uintptr(unsafe.Pointer(&errLog[0])), jitLogBytes,
		uintptr(unsafe.Pointer(&infoLog[0])), jitLogBytes,
	}
	var mod uintptr
	r := d.cuModuleLoad(&mod, image, uint32(len(opts)), opts, vals)
	runtime.KeepAlive(errLog)
	runtime.KeepAlive(infoLog)
	if err := d.check("cuModuleLoadDataEx", r); err != nil {
		if log := dynlib.CString(&errLog[0], jitLogBytes); log != "" {
			err = fmt.Errorf("%w; JIT log: %s", err, log)
		}
		return 0, err
	}
	return Module(mod), nil
}

// ModuleUnload unloads a module.
func (d *Driver) ModuleUnload(mod Module) error {
	return d.check("cuModuleUnload", d.cuModuleUnld(uintptr(mod)))
}

// ModuleGetFunction returns the kernel called name in mod.
func (d *Driver) ModuleGetFunction(mod Module, name string) (Function, error) {
	var fn uintptr
	if err := d.check("cuModuleGetFunction("+name+")", d.cuModuleGetFn(&fn, uintptr(mod), name)); err != nil {
		return 0, err
	}
	return Function(fn), nil
}

// FuncSetAttribute sets an attribute of a kernel.
func (d *Driver) FuncSetAttribute(fn Function, attr FunctionAttribute, v int) error {
	return d.check("cuFuncSetAttribute", d.cuFuncSetAttr(uintptr(fn), int32(attr), int32(v)))
}
