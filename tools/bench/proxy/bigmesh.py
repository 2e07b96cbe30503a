#!/usr/bin/env python3
"""Writes a mesh of N Services x R route rules (issue #7's activation-at-size
goal) as meshctl YAML on stdout: in namespace NS, Service svc-i (HTTP port 8080)
with one Workload and a Route of R rules (path prefix + header match, the last a
catch-all). GEN changes every rule's timeout, so each GEN is a new configuration
for every route.
Usage: bigmesh.py [--services 1000] [--rules 10] [--namespace bench] [--gen 0]
"""
import argparse

ap = argparse.ArgumentParser()
ap.add_argument("--services", type=int, default=1000)
ap.add_argument("--rules", type=int, default=10)
ap.add_argument("--namespace", default="bench")
ap.add_argument("--gen", type=int, default=0)
a = ap.parse_args()
out = []
for i in range(a.services):
    n = f"svc-{i}"
    out.append(f"""apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {{name: {n}, namespace: {a.namespace}}}
spec:
  selector: {{app: {n}}}
  ports: [{{name: http, port: 8080, targetPort: 8080, protocol: HTTP}}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {{name: {n}-a, namespace: {a.namespace}, labels: {{app: {n}}}}}
spec:
  address: 10.{i // 250}.{i % 250}.1
  serviceAccount: {n}
---""")
    rules = []
    for k in range(a.rules):
        m = ""
        if k < a.rules - 1:
            m = f"\n    match: [{{path: {{prefix: /api/v{k}/}}, headers: {{x-tenant: {{exact: t{k}}}}}}}]"
        rules.append(f"""  - name: rule-{k}{m}
    route: [{{destination: {{service: {n}, port: 8080}}, weight: 100}}]
    timeout: {1000 + a.gen * 10 + k}ms""")
    out.append(f"""apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {{name: {n}, namespace: {a.namespace}}}
spec:
  hosts: [{n}]
  http:
""" + "\n".join(rules) + "\n---")
print("\n".join(out).rstrip("-\n"))
