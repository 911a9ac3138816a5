package main

import "testing"

func TestCount(t *testing.T) {
	t.Parallel()
	n, err := count("testdata/sample")
	if err != nil {
		t.Fatal(err)
	}
	if n != 8 {
		t.Fatalf("count = %d, want 8 (A, B, T, T.F, T.M, F, I, I.N)", n)
	}
}
