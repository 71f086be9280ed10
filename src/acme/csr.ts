import { createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto';
import { oid, seq, set, tlv } from './der.js';

// A PKCS#10 certificate signing request (RFC 2986) for a P-256 key and a list of DNS names,
// all in the subjectAltName extension (what ACME's finalize takes, RFC 8555 §7.4).

const OID_CN = '2.5.4.3';
const OID_EXTENSION_REQUEST = '1.2.840.113549.1.9.14';
const OID_SUBJECT_ALT_NAME = '2.5.29.17';
const OID_ECDSA_SHA256 = '1.2.840.10045.4.3.2';

export function csrDer(key: KeyObject | string, names: string[]): Buffer {
  const privateKey = typeof key === 'string' ? createPrivateKey(key) : key;
  const spki = createPublicKey(privateKey).export({ type: 'spki', format: 'der' });
  // The CN is limited to 64 characters; a longer first name goes in the SAN only.
  const cn = names[0]!.length <= 64 ? seq(set(seq(oid(OID_CN), tlv(0x0c, Buffer.from(names[0]!, 'utf8'))))) : seq();
  const sans = seq(...names.map((n) => tlv(0x82, Buffer.from(n, 'ascii'))));
  const extensions = seq(seq(oid(OID_SUBJECT_ALT_NAME), tlv(0x04, sans)));
  const attributes = tlv(0xa0, seq(oid(OID_EXTENSION_REQUEST), set(extensions)));
  const info = seq(tlv(0x02, Buffer.from([0])), cn, spki, attributes);
  const signature = sign('sha256', info, { key: privateKey, dsaEncoding: 'der' });
  return seq(info, seq(oid(OID_ECDSA_SHA256)), tlv(0x03, Buffer.from([0]), signature));
}
