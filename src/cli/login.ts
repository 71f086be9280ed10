import type { Command } from 'commander';

// Placeholder until the OAuth helper's `burrow login` / `burrow logout` land (issue #5): it
// registers nothing, so main.ts compiles. That work replaces this file.
export function registerLogin(_program: Command): void {}
