// Fixed ports for the tests that name them (--tcp-port-range): each of the runner's lanes
// (test/run.ts sets TEST_LANE) owns a block that no other file running at the same time uses,
// below the kernel's ephemeral range (32768-60999, where outgoing connections take their ports)
// and above the test servers' default tunnel range (20000-29999). A lane runs one file at a
// time, so every file may use its lane's whole block.
const FIRST_PORT = 30_000;
export const LANE_PORTS = 450;
export const MAX_LANES = 6;

/** `size` consecutive ports of this file's lane: { min, max }. */
export function lanePorts(size: number): { min: number; max: number } {
  if (size > LANE_PORTS) throw new Error(`a lane has ${LANE_PORTS} ports, not ${size}`);
  const lane = Number(process.env.TEST_LANE ?? 0);
  if (!Number.isInteger(lane) || lane < 0 || lane >= MAX_LANES) throw new Error(`TEST_LANE ${process.env.TEST_LANE} is not 0..${MAX_LANES - 1}`);
  const min = FIRST_PORT + lane * LANE_PORTS;
  return { min, max: min + size - 1 };
}
