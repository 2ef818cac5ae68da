// The unit tests make no request.
export function handle() {
  throw new Error('no network in the SDK unit tests');
}
