// Resolve hook: `kubewasm:handler/kube@0.2.0` -> stub/kube.js, `wasi:http/types@0.2.12` ->
// stub/http-types.js and so on; everything else resolves as usual.
const STUBS = {
  'kubewasm:handler/log@0.2.0': 'log.js',
  'kubewasm:handler/log@0.1.0': 'log.js',
  'kubewasm:handler/kube@0.2.0': 'kube.js',
  'kubewasm:handler/cache@0.2.0': 'cache.js',
  'kubewasm:handler/events@0.2.0': 'events.js',
  'kubewasm:handler/settings@0.3.0': 'settings.js',
  'kubewasm:handler/shard@0.3.0': 'shard.js',
  'wasi:http/outgoing-handler@0.2.12': 'outgoing-handler.js',
  'wasi:http/types@0.2.12': 'http-types.js',
};

export async function resolve(specifier, context, next) {
  if (STUBS[specifier]) {
    return { url: new URL(`./stub/${STUBS[specifier]}`, import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
