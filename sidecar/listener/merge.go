package listener

import (
	"errors"
	"net"
	"sync"
)

// Merge is one net.Listener accepting from several (an interception-mode
// listener on 0.0.0.0 and [::], each its own tcp4/tcp6 socket so that
// SO_ORIGINAL_DST's level matches the family), so that one Server serves
// them. Each underlying listener has an accepting goroutine that hands over
// one connection, or one Accept error, at a time: no queue (a slow Server
// backs up into the kernel's backlog) and no spin on a transient error such
// as EMFILE (the Server backs off before it accepts again). Close, or any of
// them closing, closes them all; Addr is the first's.
func Merge(lns ...net.Listener) net.Listener {
	if len(lns) == 1 {
		return lns[0]
	}
	m := &merged{lns: lns, accepted: make(chan accepted), done: make(chan struct{})}
	for _, ln := range lns {
		m.wg.Add(1)
		go m.accept(ln)
	}
	return m
}

type merged struct {
	lns      []net.Listener
	accepted chan accepted
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

type accepted struct {
	c   net.Conn
	err error
}

func (m *merged) accept(ln net.Listener) {
	defer m.wg.Done()
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			m.closeAll()
			return
		}
		select {
		case m.accepted <- accepted{c, err}:
		case <-m.done:
			if c != nil {
				c.Close()
			}
			return
		}
	}
}

func (m *merged) Accept() (net.Conn, error) {
	select {
	case a := <-m.accepted:
		return a.c, a.err
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *merged) closeAll() error {
	var errs []error
	m.once.Do(func() {
		close(m.done)
		for _, ln := range m.lns {
			errs = append(errs, ln.Close())
		}
	})
	return errors.Join(errs...)
}

// Close closes every listener and waits for the accepting goroutines.
func (m *merged) Close() error {
	err := m.closeAll()
	m.wg.Wait()
	return err
}

func (m *merged) Addr() net.Addr { return m.lns[0].Addr() }
