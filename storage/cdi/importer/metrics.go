package importer

import (
	"fmt"
	"net/http"
	"strconv"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// MetricsPort is where an importer serves its progress metric (plain
// HTTP on the pod's IP; the DataVolume controller reads it).
const MetricsPort = 8443

// MetricsHandler serves p as cdiv1.ProgressMetric, labelled with the PVC's UID
// as upstream labels it, in the Prometheus text format.
func MetricsHandler(p *Progress, ownerUID string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = fmt.Fprintf(w, "# HELP %s The import progress in percentage\n# TYPE %s counter\n%s{ownerUID=%s} %s\n",
			cdiv1.ProgressMetric, cdiv1.ProgressMetric, cdiv1.ProgressMetric, strconv.Quote(ownerUID), strconv.FormatFloat(p.Get(), 'f', -1, 64))
	})
}
