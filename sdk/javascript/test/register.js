// Maps the world's imports (kubewasm:handler/..., wasi:http/...) to the stubs in test/stub/, so
// the SDK's modules load on node: `node --import ./test/register.js --test test/`.
import { register } from 'node:module';

register('./loader.js', import.meta.url);
