package checkpoint

import (
	"context"
	"os"
	"path/filepath"
)

// WriteBytes writes data as the file path, atomically: a temporary file
// in the same directory, fsynced and renamed into place, so path holds
// either its old contents or all of data. It refuses an existing path
// unless opt.Force (and then anything but a regular file) and any path
// that opt.Protect forbids, as [WriteFile] does. It serves small side
// files.
func WriteBytes(ctx context.Context, path string, data []byte, opt *WriteOptions) error {
	if opt == nil {
		opt = &WriteOptions{}
	}
	if err := checkProtected(path, opt.Protect); err != nil {
		return err
	}
	pr, err := destination(path, opt.Force, false, nil)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &Error{File: path, Off: -1, Err: err, Detail: "before writing"}
	}
	tmp, err := writeTempBytes(path, data)
	if err != nil {
		return osError(path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		os.Remove(tmp)
		return osError(path, err)
	}
	old, err := install(tmp, abs, path, pr, nil)
	if err != nil {
		return err
	}
	return finishInstall(abs, path, old)
}
