package benchdata

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// StartReplayProcess runs this binary again as the replay's child.
	ServeReplayChild()
	os.Exit(m.Run())
}

// The test's replays are small, with a window smaller than what is played.
const objects, window = 8, 4

// TestReplayProcessServesInProcessBytes watches a replay in a child process
// and one in this process, driven alike, and wants the same bytes from
// both: the initial events, live events held back by the window until
// acknowledged, and paced ones.
func TestReplayProcessServesInProcessBytes(t *testing.T) {
	in := NewReplay(ConfigMaps, DefaultSeed, objects, window)
	defer in.Close()
	child, err := StartReplayProcess(ConfigMaps, DefaultSeed, objects, window)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := child.Close(); err != nil {
			t.Error(err)
		}
	}()
	if child.FrameBytes() != in.FrameBytes() || child.InitialBytes() != in.InitialBytes() {
		t.Errorf("child: %d B per frame, %d B initial; in process: %d, %d",
			child.FrameBytes(), child.InitialBytes(), in.FrameBytes(), in.InitialBytes())
	}
	cpu0, err := child.CPU()
	if err != nil {
		t.Fatal(err)
	}

	want := watchReplay(t, in.URL(), in.Play, in.Ack, in.Play)
	got := watchReplay(t, child.URL(), child.Play, child.Ack, func(n int) { child.Pace(time.Millisecond, n) })
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Errorf("the child served %d bytes, in process %d; they differ from byte %d: %.80q, want %.80q",
			len(got), len(want), i, got[i:], want[i:])
	}
	if cpu, err := child.CPU(); err != nil || cpu <= cpu0 {
		t.Errorf("child CPU went from %v to %v (%v), want it to grow", cpu0, cpu, err)
	}
}

// watchReplay reads what the replay at url serves on a watch while it is
// played, acknowledged and paced, within a deadline.
func watchReplay(t *testing.T, url string, play, ack, pace func(n int)) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/configmaps?watch=true&sendInitialEvents=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var out []byte
	read := func(lines int) {
		t.Helper()
		for range lines {
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatalf("after %d bytes: %v", len(out), err)
			}
			out = append(out, line...)
		}
	}
	read(objects + 1) // the initial objects and the bookmark
	play(10)
	read(window) // the window holds the rest back until acknowledged
	ack(6)
	read(10 - window) // past the objects: the stream cycles
	ack(window)
	pace(3)
	read(3)
	return out
}
