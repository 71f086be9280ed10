import fc from 'fast-check';

// Property tests run on a fixed seed so that every suite run tries the same cases and a red CI
// can be replayed. To explore other seeds, set PROPERTY_SEED; a failure prints the seed and path
// to replay it with.
export const PROPERTY_SEED = process.env.PROPERTY_SEED ? Number(process.env.PROPERTY_SEED) : 20_261_125;
fc.configureGlobal({ seed: PROPERTY_SEED });
