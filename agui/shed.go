package agui

import "github.com/valyala/fastjson"

// shedAbove is the size past which a Stream's scratch buffers, and its
// parser (which keeps a copy of the last event parsed and its tree), are not
// kept for the next event: one large event must not leave its size behind
// in every stream that saw one. What the last Batch still points into stays
// alive until the Batch is reset, and is then garbage.
const shedAbove = 64 << 10

// shed drops what the event just handled made large. parsed is the size of
// the text the parser read for it (0 when it parsed nothing).
func (s *Stream) shed(parsed int) {
	if parsed > shedAbove {
		s.p = fastjson.Parser{}
	}
	if len(s.msgText) > shedAbove {
		s.mp = fastjson.Parser{}
	}
	s.msgText = nil
	for _, b := range []*[]byte{&s.cbuf, &s.rbuf, &s.tbuf, &s.hbuf} {
		if cap(*b) > shedAbove {
			*b = nil
		}
	}
}
