package certs

import (
	"crypto/x509"
	"time"
)

// Stored is what an operator's certificate Secrets hold (empty where
// missing): its CA, the bundle published so far, the leaves by Secret
// name.
type Stored struct {
	CA     KeyPair
	Bundle []byte
	Leaves map[string]KeyPair
}

// Named is a leaf and the Secret it is kept in.
type Named struct {
	Secret string
	Leaf   Leaf
}

// Plan is what an operator's certificates become.
type Plan struct {
	CA     KeyPair
	Bundle []byte
	// Leaves by Secret name.
	Leaves map[string]KeyPair
	// Due: when to look again. Renewed: "name: why", one per pair made
	// (the CA's named caSecret).
	Due     time.Time
	Renewed []string
}

// DefaultSettle is how long a new CA is published before leaves it signs
// replace valid ones: the kubelet updates mounted Secrets within its sync
// period (about a minute) and its cache.
const DefaultSettle = 2 * time.Minute

// MakePlan decides, from what is stored, which pairs to remake and makes
// them: the CA first (a new one, named caName@time, joins the bundle
// beside the previous, which stays until it expires), then each leaf that
// is missing, unusable, no longer verified by the bundle or due. A leaf
// that is only due (still valid) waits until the CA that would sign it
// has been published for settle: until every peer's bundle holds it, a
// peer would refuse a leaf it signed.
func MakePlan(r Stored, st Strategy, caName, caSecret string, leaves []Named, now time.Time, settle time.Duration) (Plan, error) {
	p := Plan{CA: r.CA, Leaves: map[string]KeyPair{}}
	v := CheckCA(r.CA, st.CA, now)
	if v.Renew {
		ca, err := NewCA(caName+"@"+now.UTC().Format(time.RFC3339), st.CA, now)
		if err != nil {
			return p, err
		}
		p.CA = ca
		p.Renewed = append(p.Renewed, caSecret+": "+v.Reason)
		// The next check of a new CA is when it is due.
		v = CheckCA(ca, st.CA, now)
	}
	p.Due = v.Due
	caCert, _, err := Parse(p.CA)
	if err != nil {
		return p, err
	}
	settled := caCert.NotBefore.Add(ClockSkew + settle)
	if p.Bundle, err = Bundle(p.CA.Cert, r.Bundle, now); err != nil {
		return p, err
	}
	roots, err := ParseBundle(p.Bundle)
	if err != nil {
		return p, err
	}
	for _, l := range leaves {
		pair := r.Leaves[l.Secret]
		v := CheckLeaf(pair, l.Leaf, roots, st.Server, now)
		if v.Renew && v.Scheduled && now.Before(settled) {
			v = Verdict{Due: settled}
		}
		if v.Renew {
			if pair, err = NewLeaf(p.CA, l.Leaf, st.Server, now); err != nil {
				return p, err
			}
			p.Renewed = append(p.Renewed, l.Secret+": "+v.Reason)
			v = CheckLeaf(pair, l.Leaf, roots, st.Server, now)
		}
		p.Leaves[l.Secret] = pair
		p.Due = Earliest(p.Due, v.Due)
	}
	return p, nil
}

// ServingLeaf is a webhook's serving certificate: its Service's DNS names
// (service.namespace.svc and with .cluster.local).
func ServingLeaf(service, namespace string) Leaf {
	svc := service + "." + namespace + ".svc"
	return Leaf{CommonName: svc, DNSNames: []string{service, svc, svc + ".cluster.local"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}
