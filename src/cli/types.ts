// The API's resource shapes as the CLI reads them (the API's resources; every field
// present, null when it has no value).

export type ApiScope = 'tunnels' | 'management';
export type Role = 'admin' | 'member';
export type TeamRole = 'owner' | 'member';

export interface ApiKey {
  id: string;
  name: string;
  key_prefix: string;
  scopes: ApiScope[];
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
}

export interface CreatedKey {
  info: ApiKey;
  key: string;
}

export interface Account {
  id: string;
  provider: string;
  created_at: string;
}

export interface User {
  id: string;
  email: string;
  name: string | null;
  avatar_url: string | null;
  role: Role;
  metadata: Record<string, unknown>;
  created_at: string;
  updated_at: string;
  deactivated_at: string | null;
}

export interface Session {
  id: string;
  user_id: string;
  tunnel_id: string;
  client_ip: string | null;
  connected_at: string;
  disconnected_at: string | null;
  bytes_in: number;
  bytes_out: number;
  requests: number;
}

export interface Team {
  id: string;
  name: string;
  created_at: string;
  updated_at: string;
}

export interface TeamMember {
  id: string;
  team_id: string;
  user_id: string;
  role: TeamRole;
  created_at: string;
}

export interface Tunnel {
  id: string;
  owner_id: string;
  team_id: string | null;
  remote_port: number | null;
  tunnel_type: string;
  uptime_secs: number;
  stats: { bytes_in: number; bytes_out: number; requests: number };
  /** access rules (whether there is basic auth, never a credential) */
  access?: { basic_auth: boolean; allow_ip: string[]; deny_ip: string[]; expires_at: string | null };
  // Added later to the API: absent from an older server.
  url?: string;
  local_target?: string | null;
  owner_name?: string | null;
  owner_email?: string | null;
  team_name?: string | null;
}
