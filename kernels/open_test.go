package kernels

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestNotifyAfter(t *testing.T) {
	errSlow := errors.New("slow")
	for _, tc := range []struct {
		name  string
		take  time.Duration // how long f runs
		wait  time.Duration
		calls int32
	}{
		{"fast", 0, time.Hour, 0},
		{"slow", 50 * time.Millisecond, time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			v, err := notifyAfter(func() (int, error) {
				time.Sleep(tc.take)
				return 7, errSlow
			}, tc.wait, func() {
				time.Sleep(100 * time.Millisecond) // outlasts f: must be waited for
				calls.Add(1)
			})
			if v != 7 || !errors.Is(err, errSlow) {
				t.Errorf("got %d, %v; want f's 7, %v", v, err, errSlow)
			}
			if got := calls.Load(); got != tc.calls {
				t.Errorf("slow called %d times by the time notifyAfter returned, want %d", got, tc.calls)
			}
		})
	}
}

// TestOpenNotifyUnavailable: on a machine without a usable GPU OpenNotify
// fails as Open does, and a quick failure says nothing.
func TestOpenNotifyUnavailable(t *testing.T) {
	d, want := Open(0)
	if want == nil {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		t.Skip("a GPU is available")
	}
	d, err := OpenNotify(0, func(msg string) { t.Errorf("note %q for a quick failure", msg) })
	if d != nil || err == nil || errors.Is(want, ErrUnavailable) != errors.Is(err, ErrUnavailable) {
		t.Errorf("OpenNotify: %v, %v; Open: %v", d, err, want)
	}
}
