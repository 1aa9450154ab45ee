package windowing

import "testing"

func TestKeyGroups(t *testing.T) {
	for _, tc := range []struct {
		r          KeyGroups
		valid, all bool
		str, scope string
		in, notIn  []int
		wantLen    int
	}{
		{r: KeyGroups{}, valid: true, all: true, str: "kg0-128", scope: "", in: []int{0, 127}, wantLen: 128},
		{r: KeyGroups{0, 128}, valid: true, all: true, str: "kg0-128", scope: "", in: []int{0, 64, 127}, wantLen: 128},
		{r: KeyGroups{0, 16}, valid: true, str: "kg0-16", scope: "kg0-16", in: []int{0, 15}, notIn: []int{16, 127}, wantLen: 16},
		{r: KeyGroups{120, 128}, valid: true, str: "kg120-128", scope: "kg120-128", in: []int{120, 127}, notIn: []int{119}, wantLen: 8},
		{r: KeyGroups{5, 5}, valid: false, str: "kg5-5", scope: "kg5-5", notIn: []int{5}},
		{r: KeyGroups{-1, 4}, valid: false, str: "kg-1-4", scope: "kg-1-4"},
		{r: KeyGroups{4, 129}, valid: false, str: "kg4-129", scope: "kg4-129"},
	} {
		if got := tc.r.Valid(); got != tc.valid {
			t.Errorf("%v.Valid() = %v, want %v", tc.r, got, tc.valid)
		}
		if got := tc.r.All(); got != tc.all {
			t.Errorf("%v.All() = %v, want %v", tc.r, got, tc.all)
		}
		if got := tc.r.String(); got != tc.str {
			t.Errorf("%v.String() = %q, want %q", tc.r, got, tc.str)
		}
		if got := tc.r.Scope(); got != tc.scope {
			t.Errorf("%v.Scope() = %q, want %q", tc.r, got, tc.scope)
		}
		for _, kg := range tc.in {
			if !tc.r.Contains(kg) {
				t.Errorf("%v does not contain %d", tc.r, kg)
			}
		}
		for _, kg := range tc.notIn {
			if tc.r.Contains(kg) {
				t.Errorf("%v contains %d", tc.r, kg)
			}
		}
		if tc.valid && tc.r.Len() != tc.wantLen {
			t.Errorf("%v.Len() = %d, want %d", tc.r, tc.r.Len(), tc.wantLen)
		}
	}
}

func TestParseKeyGroups(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want KeyGroups
		bad  bool
	}{
		{in: "kg0-16", want: KeyGroups{0, 16}},
		{in: "16-32", want: KeyGroups{16, 32}},
		{in: "kg0-128", want: KeyGroups{0, 128}},
		{in: "kg0-0", bad: true},
		{in: "kg8-4", bad: true},
		{in: "kg0-129", bad: true},
		{in: "kg0", bad: true},
		{in: "kga-b", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseKeyGroups(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseKeyGroups(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseKeyGroups(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseKeyGroups(got.String()); err != nil || back != got {
			t.Errorf("round trip of %v: %v, %v", got, back, err)
		}
	}
}

// The owner of an ad is decided by the same key group the windows use.
func TestKeyGroupsOwns(t *testing.T) {
	r := KeyGroups{0, 64}
	for _, ad := range []string{"ad-1", "ad-2", "ad-3", "ad-4", "", "x"} {
		if got, want := r.Owns(ad), KeyGroup(ad) < 64; got != want {
			t.Errorf("Owns(%q) = %v, want %v (key group %d)", ad, got, want, KeyGroup(ad))
		}
		if !AllKeyGroups.Owns(ad) {
			t.Errorf("AllKeyGroups does not own %q", ad)
		}
	}
}
