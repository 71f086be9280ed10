#!/usr/bin/env node
// burrow: the client CLI (the package's `burrow` bin). The command tree is in program.ts.
import { main } from './program.js';

// `burrow`, not `node`, in ps and pgrep.
process.title = 'burrow';

await main();
