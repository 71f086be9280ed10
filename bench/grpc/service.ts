// The gRPC service the h2 scenario calls, on @grpc/grpc-js at both ends: raw bytes (no
// protobuf), so what is measured is the gRPC framing, HTTP/2 and whatever carries them.
//   Unary     echoes the message
//   Download  server stream: [u32 size] → messages of `size` bytes, as fast as flow control lets
//             them go, until the caller cancels; each starts with the sender's monotonic clock
//             (u64 ns, process.hrtime: CLOCK_MONOTONIC, one clock for every process here)
//   PingPong  bidirectional: each message echoed as it comes
import * as grpc from '@grpc/grpc-js';

const raw = (b: Buffer): Buffer => b;
const method = (name: string, requestStream: boolean, responseStream: boolean) => ({
  path: `/burrow.bench.Echo/${name}`,
  requestStream,
  responseStream,
  requestSerialize: raw,
  requestDeserialize: raw,
  responseSerialize: raw,
  responseDeserialize: raw,
});

export const BENCH_SERVICE = {
  unary: method('Unary', false, false),
  download: method('Download', false, true),
  pingPong: method('PingPong', true, true),
} as const;

export type BenchClient = grpc.Client & {
  unary(req: Buffer, cb: (err: grpc.ServiceError | null, res?: Buffer) => void): grpc.ClientUnaryCall;
  unary(req: Buffer, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: Buffer) => void): grpc.ClientUnaryCall;
  download(req: Buffer): grpc.ClientReadableStream<Buffer>;
  pingPong(): grpc.ClientDuplexStream<Buffer, Buffer>;
};

/** One channel (one HTTP/2 connection, h2c) to `address`, naming `authority` (a tunnel's host) when given. */
export function benchClient(address: string, authority?: string): BenchClient {
  const Client = grpc.makeGenericClientConstructor(BENCH_SERVICE as unknown as grpc.ServiceDefinition, 'Echo');
  return new Client(address, grpc.credentials.createInsecure(), authority ? { 'grpc.default_authority': authority } : {}) as unknown as BenchClient;
}

/** The Download request. */
export function downloadRequest(size: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(size, 0);
  return b;
}
