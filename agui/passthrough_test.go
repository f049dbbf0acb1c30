package agui

import (
	"context"
	"testing"
)

// TestPassThroughByteIdentical: an event aguard does not change reaches the
// consumer as the very bytes it arrived as, unknown fields and all.
func TestPassThroughByteIdentical(t *testing.T) {
	s := NewStream(nil, Options{})
	var b Batch
	for _, ev := range []string{
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","vendor":{"deep":[1,2.5e3,"\u00e9\n"]}}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m","extra":true}`,
		`{"type":"VENDOR_EVENT","anything":{"goes":null}}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"h\u00e9llo \"x\""}`,
	} {
		data := []byte(ev)
		s.Feed(context.Background(), data, &b)
		if len(b.Out) != 1 || string(b.Out[0].JSON) != ev {
			t.Fatalf("Feed(%s) = %+v", ev, b.Out)
		}
		if &b.Out[0].JSON[0] != &data[0] {
			t.Fatalf("Feed(%s): output does not alias the input", ev)
		}
	}
	if b.Out[0].Type != "TEXT_MESSAGE_CONTENT" || b.InType != "TEXT_MESSAGE_CONTENT" {
		t.Fatalf("type = %q / %q", b.Out[0].Type, b.InType)
	}
}

// TestCompaction: an event spread over several data lines or with whitespace
// between tokens is compacted; nothing else about it changes.
func TestCompaction(t *testing.T) {
	tests := []struct{ in, want string }{
		{"{\"type\":\"RUN_STARTED\",\n\"threadId\":\"t\",\n\"runId\":\"r\"}", `{"type":"RUN_STARTED","threadId":"t","runId":"r"}`},
		{" { \"type\" : \"CUSTOM\" , \"name\" : \"a b\" , \"value\" : [ 1 , { } ] }\t", `{"type":"CUSTOM","name":"a b","value":[1,{}]}`},
		{"{\"type\":\"VENDOR\",\r\n \"k\": \" \\n \"}", `{"type":"VENDOR","k":" \n "}`},
	}
	for _, tt := range tests {
		s := NewStream(nil, Options{Monitor: true}) // monitor: no sequence noise
		var b Batch
		s.Feed(context.Background(), []byte(tt.in), &b)
		if len(b.Out) != 1 || string(b.Out[0].JSON) != tt.want {
			t.Fatalf("Feed(%q) = %q, want %s", tt.in, b.Out, tt.want)
		}
	}
}
