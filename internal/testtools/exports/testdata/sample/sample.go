package sample

// Exported names: A, B, T, T.F, T.M, F, I, I.N: 8.

const A, b = 1, 2

var B int

type T struct {
	F int
	g int
}

func (T) M() {}
func (T) m() {}
func (u) M() {}
func F()     {}
func f()     {}

type u struct{ X int }

type I interface{ N() }
