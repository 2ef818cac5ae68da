// The wasi:http names the SDK imports (the unit tests make no request).
export class Fields {}
export class OutgoingRequest {}
export class OutgoingBody {}
export class IncomingBody {}
export class RequestOptions {}
export function httpErrorCode() {
  return undefined;
}
