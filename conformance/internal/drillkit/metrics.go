package drillkit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Metric returns the value of the /metrics sample named exactly series (name and
// labels as printed), or -1 when absent.
func (s *Sidecar) Metric(series string) float64 {
	s.T.Helper()
	page, err := s.Scrape()
	if err != nil {
		s.T.Fatal(err)
	}
	if v, ok := page[series]; ok {
		return v
	}
	return -1
}

// Scrape reads the sidecar's /metrics into series (name{labels}) -> value.
// It does not fail the test, so goroutines other than the test's may call it.
func (s *Sidecar) Scrape() (map[string]float64, error) {
	resp, err := Client.Get("http://" + s.W.Admin() + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	page := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		i := strings.LastIndexByte(l, ' ')
		if i < 0 || strings.HasPrefix(l, "#") {
			continue
		}
		f, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", l, err)
		}
		page[l[:i]] = f
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return page, nil
}

// outliers is the sidecar's admin /outliers as raw JSON.
func (s *Sidecar) outliers() (string, error) {
	resp, err := Client.Get("http://" + s.W.Admin() + "/outliers")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/outliers: %s: %s", resp.Status, b)
	}
	return string(b), nil
}

// Ejected reports whether the sidecar's /outliers lists addr as ejected now.
func (s *Sidecar) Ejected(addr string) (bool, string, error) {
	body, err := s.outliers()
	if err != nil {
		return false, "", err
	}
	var doc any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		return false, body, fmt.Errorf("/outliers is not JSON: %w", err)
	}
	return strings.Contains(body, `"`+addr+`"`), body, nil
}

// metricsPage returns the sidecar's /metrics.
func (s *Sidecar) metricsPage() string {
	s.T.Helper()
	resp, err := Client.Get("http://" + s.W.Admin() + "/metrics")
	if err != nil {
		s.T.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.T.Fatalf("metrics: %v", err)
	}
	return string(b)
}

// MetricLines are the /metrics samples whose line starts with prefix.
func (s *Sidecar) MetricLines(prefix string) []string {
	var out []string
	for _, l := range strings.Split(s.metricsPage(), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
