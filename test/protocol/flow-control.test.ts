import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { CREDIT_BATCH_BYTES, INITIAL_WINDOW_BYTES } from '../../src/protocol/frames.js';
import { CreditMeter, ReceiveWindow, SendWindow, StreamEnds, WINDOW_SLACK_BYTES } from '../../src/protocol/flow-control.js';

// The one flow-control implementation both the edge and the client use. A sender's window and
// a receiver's meter are wired through a simulated link and a destination that sometimes
// buffers; whatever the schedule, credit never runs ahead of what the destination accepted,
// the sender never has more than a window (plus one read) in flight, and a sender that stopped
// for credit always gets going again once the destination drains.

interface Model {
  sender: SendWindow;
  meter: CreditMeter;
  receiver: ReceiveWindow;
  /** Data in flight toward the receiver, then credit in flight back. */
  dataInFlight: number[];
  creditInFlight: number[];
  /** Bytes the destination buffered (write() returned false) and bytes it accepted. */
  destinationBuffered: number;
  accepted: number;
  reported: number;
  sourcePaused: boolean;
  pauses: number;
  resumes: number;
  overrun: boolean;
  badGrant: boolean;
}

function model(window: number, batch: number): Model {
  const m = {
    dataInFlight: [],
    creditInFlight: [],
    destinationBuffered: 0,
    accepted: 0,
    reported: 0,
    sourcePaused: false,
    pauses: 0,
    resumes: 0,
    overrun: false,
    badGrant: false,
  } as unknown as Model;
  m.sender = new SendWindow(
    {
      pause: () => {
        m.sourcePaused = true;
        m.pauses++;
      },
      resume: () => {
        m.sourcePaused = false;
        m.resumes++;
      },
    },
    window,
  );
  m.receiver = new ReceiveWindow(window);
  m.meter = new CreditMeter(
    {
      reportCredit: (n: number) => {
        m.reported += n;
        m.receiver.granted(n);
        m.creditInFlight.push(n);
      },
    },
    batch,
  );
  return m;
}

type Step =
  | { op: 'read'; n: number }
  | { op: 'deliver'; taken: boolean }
  | { op: 'drain' }
  | { op: 'credit' };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ op: fc.constant('read' as const), n: fc.integer({ min: 1, max: 40 }) }),
  fc.record({ op: fc.constant('deliver' as const), taken: fc.boolean() }),
  fc.constant({ op: 'drain' as const }),
  fc.constant({ op: 'credit' as const }),
);

function run(m: Model, s: Step): void {
  switch (s.op) {
    case 'read':
      // A paused source hands over nothing more.
      if (m.sourcePaused) return;
      m.sender.spend(s.n);
      m.dataInFlight.push(s.n);
      return;
    case 'deliver': {
      const n = m.dataInFlight.shift();
      if (n === undefined) return;
      if (!m.receiver.receive(n)) m.overrun = true;
      if (s.taken) m.accepted += n;
      else m.destinationBuffered += n;
      m.meter.wrote(n, s.taken);
      return;
    }
    case 'drain':
      m.accepted += m.destinationBuffered;
      m.destinationBuffered = 0;
      m.meter.drained();
      return;
    case 'credit': {
      const n = m.creditInFlight.shift();
      if (n !== undefined && !m.sender.grant(n)) m.badGrant = true;
      return;
    }
  }
}

test('window and meter: credit never exceeds accepted bytes, in flight stays within a window and one read', () => {
  fc.assert(
    fc.property(fc.integer({ min: 40, max: 200 }), fc.integer({ min: 1, max: 40 }), fc.array(step, { maxLength: 300 }), (window, batch, steps) => {
      const m = model(window, batch);
      for (const s of steps) {
        run(m, s);
        assert.ok(m.reported <= m.accepted, 'credit reported for bytes the destination did not accept');
        assert.ok(m.sender.outstanding < window + 40, `in flight ${m.sender.outstanding} > window ${window} + one read`);
        assert.is(m.sender.paused, m.sourcePaused);
      }
      assert.not.ok(m.overrun, 'the receiver saw the sender past its window and slack');
      assert.not.ok(m.badGrant, 'the sender refused credit it was owed');
      assert.ok(m.pauses - m.resumes === 0 || m.pauses - m.resumes === 1);
    }),
  );
});

test('window and meter: once everything is delivered and drained, a stopped sender resumes', () => {
  fc.assert(
    fc.property(fc.integer({ min: 2, max: 8 }), fc.integer({ min: 1, max: 40 }), fc.array(step, { maxLength: 300 }), (ratio, batch, steps) => {
      // The window is several batches, as INITIAL_WINDOW_BYTES is to CREDIT_BATCH_BYTES.
      const window = batch * ratio;
      const m = model(window, batch);
      for (const s of steps) run(m, s);
      // Read until the window stops the source, then read nothing more and let the link and
      // the destination settle completely.
      for (let i = 0; i < 10_000 && !m.sourcePaused; i++) run(m, { op: 'read', n: 7 });
      assert.ok(m.sourcePaused);
      for (let i = 0; m.dataInFlight.length || m.creditInFlight.length || m.destinationBuffered; i++) {
        if (m.dataInFlight.length) run(m, { op: 'deliver', taken: i % 3 !== 0 });
        else if (m.destinationBuffered) run(m, { op: 'drain' });
        else run(m, { op: 'credit' });
      }
      // Nothing in flight, nothing buffered: the sender's outstanding bytes are the meter's
      // unreported remainder, under one batch, so it is not stopped.
      assert.is(m.dataInFlight.length + m.creditInFlight.length + m.destinationBuffered, 0);
      assert.ok(m.sender.outstanding < batch, `stranded: ${m.sender.outstanding} bytes never credited (batch ${batch})`);
      assert.not.ok(m.sourcePaused, 'the sender stayed paused');
    }),
  );
});

test('the default window is many credit batches (no stream waits on a batch)', () => {
  assert.ok(INITIAL_WINDOW_BYTES >= 8 * CREDIT_BATCH_BYTES);
});

test('SendWindow: pauses once spent, resumes on credit, refuses credit for bytes never sent', () => {
  const events: string[] = [];
  const w = new SendWindow({ pause: () => events.push('pause'), resume: () => events.push('resume') }, 100);
  w.spend(60);
  assert.equal(events, []);
  w.spend(60);
  assert.equal(events, ['pause']);
  assert.is(w.outstanding, 120);
  w.spend(10);
  assert.equal(events, ['pause'], 'paused once');
  assert.not.ok(w.grant(131), 'more credit than bytes outstanding');
  assert.is(w.outstanding, 130, 'a refused grant changes nothing');
  assert.ok(w.grant(20));
  assert.equal(events, ['pause'], 'still spent: 110 outstanding of 100');
  assert.ok(w.grant(20));
  assert.equal(events, ['pause', 'resume']);
  assert.not.ok(w.paused);
});

test('SendWindow: the last read of a source does not pause it (it has to be able to end)', () => {
  const events: string[] = [];
  const w = new SendWindow({ pause: () => events.push('pause'), resume: () => events.push('resume') }, 10);
  w.spend(50, false);
  assert.equal(events, []);
  assert.ok(w.grant(50));
  assert.equal(events, [], 'nothing to resume');
});

test('ReceiveWindow: a sender may overrun by the slack, not more', () => {
  const r = new ReceiveWindow(100);
  assert.ok(r.receive(100));
  assert.is(r.overrun, 0);
  assert.ok(r.receive(WINDOW_SLACK_BYTES));
  assert.is(r.overrun, WINDOW_SLACK_BYTES);
  assert.not.ok(r.receive(1));
  const s = new ReceiveWindow(100);
  s.receive(100);
  s.granted(50);
  assert.ok(s.receive(50 + WINDOW_SLACK_BYTES));
  assert.not.ok(s.receive(1));
});

test('CreditMeter: batches, and buffered bytes count only after a drain', () => {
  const reports: number[] = [];
  const m = new CreditMeter({ reportCredit: (n: number) => void reports.push(n) }, 100);
  m.wrote(60, true);
  assert.equal(reports, []);
  m.wrote(500, false);
  assert.equal(reports, [], 'buffered bytes are not accepted yet');
  m.wrote(50, true);
  assert.equal(reports, [110]);
  m.drained();
  assert.equal(reports, [110, 500]);
  m.drained();
  assert.equal(reports, [110, 500], 'nothing new');
  m.accepted(99);
  assert.equal(reports, [110, 500]);
  m.accepted(1);
  assert.equal(reports, [110, 500, 100]);
});

test('CreditMeter.holdBack: a receiver short of memory keeps credit back, so the sender has only the window less it outstanding; it all goes back when the pressure ends', () => {
  const WINDOW = 1000;
  const reports: number[] = [];
  const m = new CreditMeter({ reportCredit: (n: number) => void reports.push(n) }, 100);
  const sender = new SendWindow(undefined, WINDOW);
  const credit = (): void => {
    for (const n of reports.splice(0)) assert.ok(sender.grant(n), 'never more credit than was sent');
  };
  m.holdBack(WINDOW - 300);
  // The sender sends whatever its window allows, the destination takes everything at once.
  for (let round = 0; round < 20; round++) {
    const n = WINDOW - sender.outstanding;
    if (n <= 0) break;
    sender.spend(n);
    m.wrote(n, true);
    credit();
  }
  // Kept back: the window less the held credit (within a batch) is all the sender may still send.
  assert.ok(sender.outstanding >= WINDOW - 300 && sender.outstanding < WINDOW - 300 + 100, `outstanding ${sender.outstanding}`);
  assert.ok(WINDOW - sender.outstanding <= 300, 'the sender is held to the smaller window');
  // The pressure ends: everything accepted is reported, the sender has its whole window again.
  m.holdBack(0);
  credit();
  assert.is(sender.outstanding, 0);
});

type EndOp = 'endLocal' | 'endPeer' | 'settle' | 'finish' | 'abandon';

test('StreamEnds: finishes exactly once, when both directions ended or at a reset, and refuses everything after', () => {
  fc.assert(
    fc.property(fc.array(fc.constantFrom<EndOp>('endLocal', 'endPeer', 'settle', 'finish', 'abandon'), { maxLength: 12 }), (ops) => {
      let finished = 0;
      const e = new StreamEnds({ streamFinished: () => void finished++ });
      let local = false;
      let peer = false;
      let over = false;
      for (const op of ops) {
        switch (op) {
          case 'endLocal': {
            const r = e.endLocal();
            assert.is(r, !over && !local);
            if (r) local = true;
            break;
          }
          case 'endPeer': {
            const r = e.endPeer();
            assert.is(r, over ? 'over' : peer ? 'duplicate' : 'ok');
            if (r === 'ok') peer = true;
            break;
          }
          case 'settle': {
            const before = finished;
            e.settle();
            if (!over && local && peer) {
              over = true;
              assert.is(finished, before + 1);
            } else assert.is(finished, before);
            break;
          }
          case 'finish':
            assert.is(e.finish(), !over);
            over = true;
            break;
          case 'abandon': {
            const before = finished;
            assert.is(e.finish(false), !over);
            assert.is(finished, before, 'a quiet finish does not notify');
            over = true;
            break;
          }
        }
        assert.is(e.done, over);
        assert.is(e.localDone, local);
        assert.is(e.peerDone, peer);
        assert.ok(finished <= 1);
      }
    }),
  );
});

test.run();
