package chaos

import "context"

func (r *run) badInput(ctx context.Context) Result {
	return Result{Tried: "not written", Held: "broke: not written"}
}
