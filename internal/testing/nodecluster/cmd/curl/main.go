// Command curl stands in for the curl image the chart's `helm test` Pod
// runs, which the node cluster cannot pull. It accepts exactly the options
// that Pod passes (charts/kubewire/templates/tests/readyz.yaml) and behaves
// as curl does with them: GET the URL, retrying every --retry-delay seconds
// up to --retry times on any error, and exit non-zero unless the last answer
// was a 2xx. An option it does not know is an error, so a change to the
// chart's command shows up here instead of passing unnoticed.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	retries, delay, maxTime := 0, time.Second, 0*time.Second
	url := ""
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		value := func() string {
			i++
			if i == len(args) {
				fail("option %s needs a value", args[i-1])
			}
			return args[i]
		}
		switch a := args[i]; a {
		case "--fail", "--silent", "--show-error", "--retry-all-errors":
		case "--retry":
			retries = atoi(value())
		case "--retry-delay":
			delay = time.Duration(atoi(value())) * time.Second
		case "--max-time":
			maxTime = time.Duration(atoi(value())) * time.Second
		default:
			if len(a) > 0 && a[0] == '-' || url != "" {
				fail("unexpected argument %q", a)
			}
			url = a
		}
	}
	if url == "" {
		fail("no URL")
	}
	var err error
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			time.Sleep(delay) // curl's --retry-delay
		}
		if err = get(url, maxTime); err == nil {
			return
		}
		fmt.Fprintln(os.Stderr, "curl:", err)
	}
	os.Exit(22) // curl's exit code for an HTTP error with --fail
}

func get(url string, maxTime time.Duration) error {
	ctx := context.Background()
	if maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, maxTime)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	os.Stdout.Write(body)
	return nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail("not a number: %q", s)
	}
	return n
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "curl stand-in: "+format+"\n", args...)
	os.Exit(2)
}
