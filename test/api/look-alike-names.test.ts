import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api } from '../helpers/fixtures.js';
import { nameKey, nameProblem } from '../../src/names.js';

// Distinct accounts and teams that look the same (fullwidth or Cyrillic
// letters, NFC and NFD forms, zero-width and bidi characters). Emails and team names are stored
// in NFKC form, compared case-folded (409 on a collision), and refused when they hide characters
// or mix scripts in a word.

let t: TestServer;

test.before(async () => {
  t = await startServer();
});

test.after(async () => {
  await t?.stop();
});

const createUser = (email: string) => api(t, 'POST', '/users', { key: t.adminKey, body: { email } });
const createTeam = (name: string) => api(t, 'POST', '/teams', { key: t.adminKey, body: { name } });

test('emails: fullwidth, NFD and other-case forms of an existing address are conflicts; the stored form is NFKC', async () => {
  const first = await createUser('jose.n@example.com');
  assert.is(first.status, 201, first.text);
  for (const twin of ['ＪＯＳＥ.N@EXAMPLE.COM', 'Jose.N@Example.com']) {
    const r = await createUser(twin);
    assert.is(r.status, 409, `${twin}: ${r.text}`);
  }
  const nfc = await createUser('jos\u00e9@example.com');
  assert.is(nfc.status, 201, nfc.text);
  const nfd = await createUser('jose\u0301@example.com');
  assert.is(nfd.status, 409, 'NFD of an NFC address');
  const wide = await createUser('ｆｕｌｌ@example.com');
  assert.is(wide.status, 201, wide.text);
  assert.is(wide.body.email, 'full@example.com');
});

test('emails: invisible, bidi and mixed-script addresses are refused', async () => {
  for (const [email, why] of [
    ['ad\u200Bmin@example.com', /invisible or text-direction character \(U\+200B\)/],
    ['admin\u2066@example.com', /U\+2066/],
    ['p\u0430ypal@example.com', /mixes Latin and Cyrillic letters in "p\u0430ypal"/],
  ] as const) {
    const r = await createUser(email);
    assert.is(r.status, 400, `${JSON.stringify(email)}: ${r.text}`);
    assert.match(r.body.detail, why);
  }
});

test('team names: look-alikes are conflicts; hidden characters and mixed scripts are refused', async () => {
  const stamp = Date.now().toString(36);
  const web = await createTeam(`Web ${stamp}`);
  assert.is(web.status, 201, web.text);
  for (const twin of [`WEB ${stamp}`, `ｗｅｂ ${stamp}`, `web ${stamp}`]) {
    const r = await createTeam(twin);
    assert.is(r.status, 409, `${twin}: ${r.text}`);
  }
  assert.is((await createTeam(`Straße ${stamp}`)).status, 201);
  assert.is((await createTeam(`STRASSE ${stamp}`)).status, 409, 'ß folds with SS');
  for (const bad of [`web\u202E${stamp}`, `w\u200Deb ${stamp}`, `\u0440\u0430ypal ${stamp}`]) {
    const r = await createTeam(bad);
    assert.is(r.status, 400, `${JSON.stringify(bad)}: ${r.text}`);
  }
  assert.is((await createTeam(`Команда ${stamp}`)).status, 201, 'a name in one script is fine');
});

test('the key and the checks in isolation', () => {
  assert.is(nameKey('Ｗｅｂ'), nameKey('web'));
  assert.is(nameKey('e\u0301'), nameKey('\u00e9'));
  assert.is(nameKey('ﬁle'), nameKey('FILE'));
  assert.is(nameProblem('plain name', 'x'), null);
  assert.ok(nameProblem('a\u00ADb', 'x'), 'soft hyphen is invisible');
  assert.ok(nameProblem('a\u200Eb', 'x'), 'LRM');
});

test.run();
