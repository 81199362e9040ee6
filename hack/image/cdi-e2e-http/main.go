// Command cdi-e2e-http serves a directory over HTTP for the CDI e2e test
// (test/e2e/cdi_test.go): the images the test made on the node, mounted
// into its pod. Under /slow/ the same files come at most -rate bytes a
// second, so that an import lasts long enough to be watched progressing.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	dir := flag.String("dir", "/srv", "the directory to serve")
	addr := flag.String("addr", ":8080", "the address to listen on")
	rate := flag.Int("rate", 64<<20, "bytes per second under /slow/")
	flag.Parse()
	files := http.FileServer(http.Dir(*dir))
	mux := http.NewServeMux()
	mux.Handle("/", files)
	mux.Handle("/slow/", http.StripPrefix("/slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		files.ServeHTTP(&throttled{ResponseWriter: w, rate: *rate, start: time.Now()}, r)
	})))
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-e2e-http:", err)
		os.Exit(1)
	}
}

// throttled writes no faster than rate bytes a second.
type throttled struct {
	http.ResponseWriter
	rate  int
	start time.Time
	n     int
}

func (t *throttled) Write(b []byte) (int, error) {
	n, err := t.ResponseWriter.Write(b)
	t.n += n
	if ahead := time.Duration(float64(t.n)/float64(t.rate)*float64(time.Second)) - time.Since(t.start); ahead > 0 {
		time.Sleep(ahead)
	}
	return n, err
}
