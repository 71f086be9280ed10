import type { Sql } from '../db/sql.js';
import { verifiedRoutes } from '../db/custom-domains.js';

// A shard's map of verified custom domains to their tunnel ids: the front asks it for a Host
// that is not <id>.<domain>. Loaded at start and again whenever main says a domain changed.

export class DomainRoutes {
  private routes = new Map<string, string>();

  async load(sql: Sql): Promise<number> {
    this.routes = await verifiedRoutes(sql);
    return this.routes.size;
  }

  /** The tunnel id of a Host header naming a verified custom domain (any port), or null. */
  tunnelOf(host: string): string | null {
    if (this.routes.size === 0) return null;
    const colon = host.lastIndexOf(':');
    const name = (colon > 0 && !host.endsWith(']') ? host.slice(0, colon) : host).toLowerCase();
    return this.routes.get(name.endsWith('.') ? name.slice(0, -1) : name) ?? null;
  }
}
