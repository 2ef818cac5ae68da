"""Stand-in for the bindings componentize-py generates for kubewasm:handler@0.1.0 (wit/handler.wit)."""


class WitWorld:
    pass
