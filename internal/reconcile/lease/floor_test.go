package lease

import (
	"testing"
	"time"
)

func TestReleaseFloorRoundsUpToTheWholeSecondTheAPIServerStores(t *testing.T) {
	bound := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		minimum string
		want    time.Duration
	}{
		{"24h", 24 * time.Hour},
		{"24h0.5s", 24*time.Hour + time.Second},
		{"86400.25s", 24*time.Hour + time.Second},
		{"1440m0.001s", 24*time.Hour + time.Second},
		{"24h0m0.000000001s", 24*time.Hour + time.Second},
		{"25h0.5s", 25*time.Hour + time.Second},
		{"87600h", 87600 * time.Hour},
	} {
		d, err := time.ParseDuration(c.minimum)
		if err != nil {
			t.Fatal(err)
		}
		got := releaseFloor(bound, d)
		if want := bound.Add(c.want); !got.Time.Equal(want) {
			t.Errorf("a %s lease bound at %s: earliestReleaseAt %s, want %s", c.minimum, bound, got.Time, want)
		}
		// What the API server stores (RFC 3339, whole seconds) reads back
		// the same: extend then finds nothing to write.
		stored, err := time.Parse(time.RFC3339, got.UTC().Format(time.RFC3339))
		if err != nil || !stored.Equal(got.Time) {
			t.Errorf("a %s lease: earliestReleaseAt %s does not survive storage (%s)", c.minimum, got.Time, stored)
		}
	}
}
