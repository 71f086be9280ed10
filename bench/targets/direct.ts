// The baseline: the load tool talks to the origin itself. No server process of its own.
import type { Target } from './target.js';

export function directTarget(): Target {
  return {
    name: 'direct',
    describe: 'load tool straight at the origin on 127.0.0.1',
    expose: async (_kind, originPort) => ({ port: originPort }),
    serverPids: () => [],
    clientPids: () => [],
    closeTunnels: async () => {},
    close: async () => {},
  };
}
