def handle(request, options):
    raise NotImplementedError("no network in the SDK's unit tests")
