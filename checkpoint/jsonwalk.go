package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// invalidText returns the index of the first byte of b that is not valid
// UTF-8 or that starts a \u escape of a lone UTF-16 surrogate (which
// encoding/json would silently turn into U+FFFD), or -1 when there is none.
func invalidText(b []byte) int {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return i
			}
			i += n
		}
	}
	// In valid JSON every backslash begins an escape inside a string;
	// elsewhere the JSON decoder rejects the text anyway.
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return -1
		}
		i += j
		v, ok := hexEscape(b[i:])
		switch {
		case !ok:
			i += 2 // an escape of one ASCII character, or invalid JSON
		case v >= 0xD800 && v < 0xDC00:
			if w, ok := hexEscape(b[i+6:]); !ok || w < 0xDC00 || w >= 0xE000 {
				return i
			}
			i += 12
		case v >= 0xDC00 && v < 0xE000:
			return i
		default:
			i += 6
		}
		if i >= len(b) {
			return -1
		}
	}
}

// hexEscape decodes a \uXXXX escape at the start of b.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

// jsonWalker reads a JSON text token by token, so that the parsers see
// every key (encoding/json's struct decoding keeps the last of duplicate
// keys and matches field names case-insensitively).
type jsonWalker struct {
	dec   *json.Decoder
	text  []byte
	base  int64 // absolute offset of text[0]
	class error // the class of syntax errors
}

// newJSONWalker returns a walker over the JSON text b, which starts at
// file offset base; its syntax errors wrap class. It fails, with class,
// when b is not valid UTF-8 or escapes a lone surrogate (see invalidText).
func newJSONWalker(b []byte, base int64, class error) (*jsonWalker, error) {
	if i := invalidText(b); i >= 0 {
		return nil, newError("", base+int64(i), class, "invalid UTF-8 or lone surrogate escape")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return &jsonWalker{dec: dec, text: b, base: base, class: class}, nil
}

// off returns the absolute offset of the next token: past the last token
// read and the whitespace, colon or comma that follow it.
func (w *jsonWalker) off() int64 {
	i := w.dec.InputOffset()
	for i < int64(len(w.text)) {
		switch w.text[i] {
		case ' ', '\t', '\n', '\r', ':', ',':
			i++
			continue
		}
		break
	}
	return w.base + i
}

// more reports whether the current object or array has another element.
func (w *jsonWalker) more() bool { return w.dec.More() }

// token reads the next token; syntax errors and a premature end wrap class.
func (w *jsonWalker) token(tensor string, class error) (json.Token, error) {
	off := w.off()
	tok, err := w.dec.Token()
	if err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			// The decoder reports the offset of the offending byte or
			// just past it, depending on where it found the error.
			off = max(off, w.base+se.Offset-1)
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, newError(tensor, off, class, err.Error())
	}
	return tok, nil
}

// key reads an object key.
func (w *jsonWalker) key() (string, error) {
	tok, err := w.token("", w.class)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok { // unreachable: the decoder only yields strings as keys
		return "", newError("", w.off(), w.class, "object key is not a string")
	}
	return s, nil
}

// objectRules describe one kind of JSON object to jsonWalker.object.
type objectRules struct {
	tensor   string // the tensor its errors name, "" for none
	what     string // what the object is, for the error when it is not one
	class    error  // the class of that error
	endClass error  // the class of an error where the object should end
	// duplicate returns the error of key, at offset off, seen twice.
	duplicate func(key string, off int64) error
}

// memberFunc reads the value of the member key, whose key starts at
// absolute offset off.
type memberFunc func(key string, off int64) error

// document reads the whole text as one object, as object does, with
// nothing but whitespace after it.
func (w *jsonWalker) document(r objectRules, member memberFunc) error {
	if err := w.object(r, member); err != nil {
		return err
	}
	return w.end()
}

// object reads an object from its '{' to its '}'. For each key it calls
// member, which reads the value; a key that repeats within the object
// fails with r.duplicate's error before member sees it.
func (w *jsonWalker) object(r objectRules, member memberFunc) error {
	if err := w.delim(json.Delim('{'), r.tensor, r.class, r.what); err != nil {
		return err
	}
	return w.members(r, member)
}

// members reads the rest of an object whose '{' has been read, as object
// does.
func (w *jsonWalker) members(r objectRules, member memberFunc) error {
	seen := make(map[string]struct{})
	for w.more() {
		off := w.off()
		k, err := w.key()
		if err != nil {
			return err
		}
		if _, dup := seen[k]; dup {
			return r.duplicate(k, off)
		}
		seen[k] = struct{}{}
		if err := member(k, off); err != nil {
			return err
		}
	}
	return w.delim(json.Delim('}'), r.tensor, r.endClass, "the object's end")
}

// delim reads the next token and checks that it is want.
func (w *jsonWalker) delim(want json.Delim, tensor string, class error, what string) error {
	off := w.off()
	tok, err := w.token(tensor, class)
	if err != nil {
		return err
	}
	if tok != want {
		return newError(tensor, off, class, fmt.Sprintf("%s must be %s, not %s", what, kindOf(want), kindOf(tok)))
	}
	return nil
}

// end checks that only whitespace follows the top-level value.
func (w *jsonWalker) end() error {
	off := w.off()
	tok, err := w.dec.Token()
	if err == io.EOF {
		return nil
	}
	detail := "data after the top-level object"
	if err == nil {
		detail += ": " + kindOf(tok)
	}
	return newError("", off, w.class, detail)
}

// kindOf describes a JSON token for an error message.
func kindOf(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "'" + v.String() + "'"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// clip quotes s for an error message, shortened if it is long.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strconv.Quote(s[:i]) + "..."
}
