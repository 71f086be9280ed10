// Scopes a key may carry and roles a user may have (spec: ApiScope, Role, TeamRole): words of
// the API, the database and the messages between threads alike, so they live at the bottom layer.
export const SCOPES = ['tunnels', 'management'] as const;
export type Scope = (typeof SCOPES)[number];
export const ROLES = ['admin', 'member'] as const;
export type Role = (typeof ROLES)[number];
export const TEAM_ROLES = ['owner', 'member'] as const;
export type TeamRole = (typeof TEAM_ROLES)[number];

/**
 * What a route asks of the key: `management`, `tunnels` (the control WebSocket),
 * `tunnels-or-management` (/tunnels), or `any` valid key (/me, /accounts).
 */
export type ScopeRequirement = 'management' | 'tunnels' | 'tunnels-or-management' | 'any';

export function scopeAllows(req: ScopeRequirement, scopes: readonly Scope[]): boolean {
  switch (req) {
    case 'any':
      return true;
    case 'management':
      return scopes.includes('management');
    case 'tunnels':
      return scopes.includes('tunnels');
    case 'tunnels-or-management':
      return scopes.includes('tunnels') || scopes.includes('management');
  }
}
