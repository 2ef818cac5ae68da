"""Stand-in for the bindings componentize-py generates for kubewasm:handler@0.3.0 (both worlds:
`imports` holds `settings`, `shard` and `controller_types` too). `WitWorld` names neither world's
exports, so the SDK builds handlers and controllers alike over it."""


class WitWorld:
    pass
