import * as grpc from '@grpc/grpc-js';

// A gRPC echo service on @grpc/grpc-js for the tests that carry gRPC through burrow: messages are
// raw bytes (no protobuf), so what crosses burrow is the gRPC framing and the HTTP/2 fields.
//   unary: echoes the message, x-token back as x-echo, x-blob-bin back; trailer x-length;
//          "fail" → NOT_FOUND (a trailers-only answer), "hang" → never answered
//   serverStream: [u32 count][u32 gap ms] → that many messages, trailer x-sent
//   clientStream: counts messages and bytes;  bidi: answers each message as it comes

const raw = { serialize: (b: Buffer) => b, deserialize: (b: Buffer) => b };
const method = (name: string, requestStream: boolean, responseStream: boolean) => ({
  path: `/burrow.test.Echo/${name}`,
  requestStream,
  responseStream,
  requestSerialize: raw.serialize,
  requestDeserialize: raw.deserialize,
  responseSerialize: raw.serialize,
  responseDeserialize: raw.deserialize,
});
export const SERVICE = {
  unary: method('Unary', false, false),
  serverStream: method('ServerStream', false, true),
  clientStream: method('ClientStream', true, false),
  bidi: method('Bidi', true, true),
} as const;
/** Messages of 4 MiB and more pass (grpc-js refuses over 4 MiB by default). */
export const LIMITS = { 'grpc.max_receive_message_length': 8 * 1024 * 1024, 'grpc.max_send_message_length': 8 * 1024 * 1024 };

export type EchoClient = grpc.Client & Record<keyof typeof SERVICE, (...a: unknown[]) => grpc.ClientUnaryCall & grpc.ClientReadableStream<Buffer> & grpc.ClientWritableStream<Buffer> & grpc.ClientDuplexStream<Buffer, Buffer>>;

export interface Echo {
  server: grpc.Server;
  port: number;
  /** Calls the server saw end by cancellation, by their x-call metadata. */
  cancelled: Set<string>;
  /** Deadlines the server read from grpc-timeout (grpc-js takes it out of the metadata). */
  deadlines: string[];
}

export async function startEcho(credentials = grpc.ServerCredentials.createInsecure()): Promise<Echo> {
  const server = new grpc.Server(LIMITS);
  const cancelled = new Set<string>();
  const deadlines: string[] = [];
  server.addService(SERVICE as unknown as grpc.ServiceDefinition, {
    unary(call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) {
      const md = call.metadata;
      const deadline = call.getDeadline();
      if (deadline !== Infinity) deadlines.push(String(deadline));
      call.on('cancelled', () => cancelled.add(String(md.get('x-call')[0] ?? '')));
      const what = call.request.subarray(0, 16).toString('latin1');
      if (what === 'fail') return done({ code: grpc.status.NOT_FOUND, details: 'no such thing: ünïcode' });
      if (what === 'hang') return;
      const head = new grpc.Metadata();
      head.set('x-echo', String(md.get('x-token')[0] ?? ''));
      const bin = md.get('x-blob-bin')[0];
      if (bin) head.set('x-blob-bin', bin as Buffer);
      call.sendMetadata(head);
      const trailer = new grpc.Metadata();
      trailer.set('x-length', String(call.request.length));
      done(null, call.request, trailer);
    },
    serverStream(call: grpc.ServerWritableStream<Buffer, Buffer>) {
      const n = call.request.readUInt32BE(0);
      const gapMs = call.request.readUInt32BE(4);
      call.on('cancelled', () => cancelled.add(String(call.metadata.get('x-call')[0] ?? '')));
      let i = 0;
      const next = (): void => {
        if (call.cancelled) return;
        if (i === n) {
          const t = new grpc.Metadata();
          t.set('x-sent', String(n));
          return void call.end(t);
        }
        call.write(Buffer.from(`message ${i++}`));
        setTimeout(next, gapMs);
      };
      next();
    },
    clientStream(call: grpc.ServerReadableStream<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) {
      let count = 0;
      let bytes = 0;
      call.on('data', (m: Buffer) => {
        count++;
        bytes += m.length;
      });
      call.on('end', () => done(null, Buffer.from(`${count} messages, ${bytes} bytes`)));
    },
    bidi(call: grpc.ServerDuplexStream<Buffer, Buffer>) {
      call.on('data', (m: Buffer) => call.write(Buffer.concat([Buffer.from('echo: '), m])));
      call.on('end', () => call.end());
    },
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', credentials, (err, p) => (err ? reject(err) : resolve(p))));
  return { server, port, cancelled, deadlines };
}

/** A client of the tunnel `authority` through burrowd at `address` (h2c). */
export function echoClient(address: string, authority: string): EchoClient {
  return new (grpc.makeGenericClientConstructor(SERVICE as unknown as grpc.ServiceDefinition, 'Echo'))(address, grpc.credentials.createInsecure(), {
    ...LIMITS,
    'grpc.default_authority': authority,
  }) as unknown as EchoClient;
}

/** The serverStream request: `count` messages, `gapMs` apart. */
export function streamRequest(count: number, gapMs: number): Buffer {
  const req = Buffer.alloc(8);
  req.writeUInt32BE(count, 0);
  req.writeUInt32BE(gapMs, 4);
  return req;
}

/** Opens a long server stream tagged `tag` (x-call) and cancels it once its first message came. */
export async function cancelAfterFirst(client: EchoClient, tag: string): Promise<void> {
  const md = new grpc.Metadata();
  md.set('x-call', tag);
  const call = client.serverStream(streamRequest(1000, 100), md);
  call.on('error', () => undefined);
  await new Promise((resolve) => call.once('data', resolve));
  call.cancel();
}

export interface UnaryResult {
  err: grpc.ServiceError | null;
  value?: Buffer;
  head?: grpc.Metadata;
  status?: grpc.StatusObject;
}

/** One unary call: its error or value, the answer's metadata and its status (with the trailers). */
export function unaryCall(client: EchoClient, body: Buffer, md = new grpc.Metadata(), opts: grpc.CallOptions = {}): Promise<UnaryResult> {
  return new Promise((resolve) => {
    let head: grpc.Metadata | undefined;
    let status: grpc.StatusObject | undefined;
    const call = client.unary(body, md, opts, (err: grpc.ServiceError | null, value?: Buffer) => setImmediate(() => resolve({ err, value, head, status })));
    call.on('metadata', (m: grpc.Metadata) => (head = m));
    call.on('status', (s: grpc.StatusObject) => (status = s));
  });
}
