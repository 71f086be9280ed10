import { X509Certificate } from 'node:crypto';
import { children, read } from './der.js';

// What ACME needs to know of an issued certificate: its validity, and its ARI identifier
// (RFC 9773 §4.1: base64url(Authority Key Identifier) "." base64url(serial number)).

const AKI_OID = Buffer.from([0x06, 0x03, 0x55, 0x1d, 0x23]);

/** The leaf (first) certificate of a PEM chain. */
export function leaf(chainPem: string): X509Certificate {
  const m = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(chainPem);
  if (!m) throw new Error('no certificate in the chain');
  return new X509Certificate(m[0]);
}

export function validity(cert: X509Certificate): { notBefore: Date; notAfter: Date } {
  return { notBefore: new Date(cert.validFrom), notAfter: new Date(cert.validTo) };
}

/** The keyIdentifier of the Authority Key Identifier extension, or null where there is none. */
function authorityKeyId(der: Buffer): Buffer | null {
  // The extension is SEQUENCE { OID 2.5.29.35, [critical BOOLEAN], OCTET STRING { SEQUENCE { [0] keyIdentifier, … } } }.
  const at = der.indexOf(AKI_OID);
  if (at < 0) return null;
  const id = read(der, at);
  let n = read(der, id.end);
  if (n.tag === 0x01) n = read(der, n.end);
  if (n.tag !== 0x04) return null;
  const inner = read(n.body, 0);
  const keyId = children(inner.body).find((c) => c.tag === 0x80);
  return keyId ? Buffer.from(keyId.body) : null;
}

export function ariCertId(cert: X509Certificate): string | null {
  const aki = authorityKeyId(cert.raw);
  if (!aki) return null;
  let hex = cert.serialNumber.toLowerCase();
  if (hex.length % 2) hex = `0${hex}`;
  // DER INTEGER: a leading 0x00 keeps a serial with its top bit set positive.
  if (/^[89a-f]/.test(hex)) hex = `00${hex}`;
  return `${aki.toString('base64url')}.${Buffer.from(hex, 'hex').toString('base64url')}`;
}
