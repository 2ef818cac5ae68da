from dataclasses import dataclass


@dataclass
class StreamError_Closed:
    pass


@dataclass
class StreamError_LastOperationFailed:
    value: object
