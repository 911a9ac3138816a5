package emulator

// DispatchOnce runs one dispatch pass at the clock's time without waiting
// for the attempts, so tests can check what a pass holds back.
func DispatchOnce(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := s.dispatchDueLocked(s.clock.Now())
	return n
}
