"""Developer tooling, not shipped to production: local broker, event generator, local stack, demo,
standalone cluster and benchmarks. The production package (apps, transforms, runtime, supervision,
reconciliation, config) never imports from here."""
