"""Answers `objects` (a list of WIT objects) to every read, or raises `answer` if set."""
objects = []
answer = None


def get(api_version, kind, namespace, name):
    if answer:
        raise answer
    return next((o for o in objects if o.meta.name == name and o.meta.namespace == namespace), None)


def list(api_version, kind, namespace, label_selector):
    if answer:
        raise answer
    return objects
