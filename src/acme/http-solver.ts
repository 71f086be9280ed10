import type { Logger } from '../log.js';
import type { AcmeStore } from '../db/acme.js';
import type { Pending, Solver } from './order.js';

// HTTP-01 (custom domains): the key authorization goes into the database, where any node's
// --http-port answers /.well-known/acme-challenge/<token> from (acme-challenge-route.ts); the CA
// may reach any node behind the domain's address.

export class HttpSolver implements Solver {
  constructor(
    private readonly store: AcmeStore,
    private readonly log: Logger,
  ) {}

  typeFor(): 'http-01' {
    return 'http-01';
  }

  async present(challenges: Pending[]): Promise<void> {
    for (const c of challenges) await this.store.addChallenge(c.token, c.keyAuth, c.name);
  }

  async cleanup(challenges: Pending[]): Promise<void> {
    for (const c of challenges) await this.store.removeChallenge(c.token).catch((err: unknown) => this.log.warn({ err }, 'ACME: could not remove an HTTP-01 token'));
  }
}
