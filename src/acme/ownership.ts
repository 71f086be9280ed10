import { authoritativeServers, cnameTarget, txtValues, type DnsServer } from './dns-wait.js';
import { ownershipTxtName } from './domain-name.js';

// Whether a user controls a custom domain: the TXT record _burrow-challenge.<name> holds their
// token, or <name> is a CNAME to the tunnel's host. Asked of the zone's authoritative servers
// (or --dns-resolver), never of a cache.

/** null when verified, else why not (shown to the user as it is). */
export async function checkOwnership(name: string, token: string, tunnelHost: string, resolvers: DnsServer[] | null): Promise<string | null> {
  const txtName = ownershipTxtName(name);
  let servers = resolvers;
  if (!servers) {
    try {
      servers = await authoritativeServers(name);
    } catch (err) {
      return (err as Error).message;
    }
  }
  const txt = await txtValues(txtName, servers);
  if (txt.includes(token)) return null;
  const cname = await cnameTarget(name, servers);
  if (cname === tunnelHost) return null;
  const saw = [txt.length > 0 ? `TXT ${txtName} holds ${txt.length} other value${txt.length === 1 ? '' : 's'}` : `no TXT at ${txtName}`, cname ? `CNAME to ${cname}` : 'no CNAME'];
  return `neither the TXT record nor the CNAME is in place (${saw.join(', ')}): create TXT ${txtName} "${token}" or CNAME ${name} → ${tunnelHost}`;
}
