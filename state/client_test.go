package state

import (
	"strings"
	"testing"
)

// TestCheckRedisURLTakesWhatEachModeParses pins that a --redis URL is
// checked by the parser of its --redis-mode, as a Store would parse it,
// without a server: a sentinel URL needs master_name, a cluster URL takes
// several addr.
func TestCheckRedisURLTakesWhatEachModeParses(t *testing.T) {
	for _, tt := range []struct {
		mode, url string
		want      string // "" for a URL the mode takes
	}{
		{ModeSingle, "redis://redis:6379/0", ""},
		{"", "redis://redis:6379/0", ""},
		{ModeSentinel, "redis://s1:26379/0?master_name=mymaster&addr=s2:26379", ""},
		{ModeCluster, "redis://n1:6379?addr=n2:6379&addr=n3:6379", ""},
		{ModeSentinel, "redis://s1:26379/0", "no master_name"},
		{ModeSingle, "redis://redis:6379/notadb", "redis url"},
		{ModeCluster, "redis://n1:6379?pool_size=many", "redis cluster url"},
		{"ring", "redis://redis:6379/0", "not single, sentinel or cluster"},
	} {
		err := CheckRedisURL(tt.mode, tt.url)
		if tt.want == "" && err != nil {
			t.Errorf("%s %s: %v", tt.mode, tt.url, err)
		}
		if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s %s: error %v, want one saying %q", tt.mode, tt.url, err, tt.want)
		}
	}
}

// TestRedisURLErrorsHideThePasswords pins that an error about a Redis URL
// shows neither the password of its user info nor the password go-redis
// takes from the query of a sentinel URL (the primary's, apart from the
// sentinels').
func TestRedisURLErrorsHideThePasswords(t *testing.T) {
	for _, tt := range []struct{ mode, url string }{
		{ModeSentinel, "redis://:sentinel-pw@s1:26379/0?password=primary-pw&addr=s2:26379"},
		{ModeSingle, "redis://:user-pw@redis:6379/x?password=primary-pw"},
		{ModeSentinel, "redis://s1:26379/0?pass%77ord=primary-pw"},
	} {
		err := CheckRedisURL(tt.mode, tt.url)
		if err == nil {
			t.Fatalf("%s %s: no error", tt.mode, tt.url)
		}
		for _, pw := range []string{"sentinel-pw", "user-pw", "primary-pw"} {
			if strings.Contains(err.Error(), pw) {
				t.Errorf("the error shows the password %q: %v", pw, err)
			}
		}
		if strings.Contains(tt.url, "addr=s2:26379") && !strings.Contains(err.Error(), "addr=s2:26379") {
			t.Errorf("the error hides the sentinels' addresses: %v", err)
		}
	}
}
