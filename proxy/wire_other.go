//go:build !unix

package proxy

import "errors"

// wireReadsFD: the wire cannot read its socket directly here; streams read
// it through Go's net package (stream.pump).
const wireReadsFD = false

func (w *wire) readFD(b []byte) (int, error) {
	return 0, errors.New("aguard: direct socket reads are not supported on this platform")
}
