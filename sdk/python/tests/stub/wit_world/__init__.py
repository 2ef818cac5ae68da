"""Stand-in for the bindings componentize-py generates for kubewasm:handler@0.2.0."""


class WitWorld:
    pass
