package dialect

import (
	"regexp"
	"testing"
)

func TestBodyMarkMatchesItsPattern(t *testing.T) {
	re := regexp.MustCompile(BodyMarkPattern + "\n")
	for _, a := range []TaskLease{{ID: 1, Token: 11}, {ID: 9223372036854775807, Token: -5}} {
		if m := BodyMark(a); !re.MatchString(m) {
			t.Errorf("BodyMark(%+v) = %q does not match %s", a, m, BodyMarkPattern)
		}
	}
}
