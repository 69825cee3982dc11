package checkpoint

import (
	"context"
	"os"
	"path/filepath"
)

// WriteBytes writes data as the file path, atomically: a temporary file
// in the same directory, fsynced and renamed into place, so path holds
// either its old contents or all of data. It refuses an existing path
// unless opt.Force and any path that opt.Protect forbids, as [WriteFile]
// does. It serves small side files such as reports.
func WriteBytes(ctx context.Context, path string, data []byte, opt *WriteOptions) error {
	if opt == nil {
		opt = &WriteOptions{}
	}
	if err := checkProtected(path, opt.Protect); err != nil {
		return err
	}
	if err := checkDestination(path, opt.Force, false); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &Error{File: path, Off: -1, Err: err, Detail: "before writing"}
	}
	f, tmp, err := createTemp(dirOf(path), "."+filepath.Base(path)+".tmp-", 0o666)
	if err != nil {
		return osError(path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return osError(path, err)
	}
	return installFile(tmp, path, opt.Force)
}
