-- :ContenoxExplainContext — the segment table (kind, tokens, cached/new, totals) in a float.
local util = require('contenox.util')

local M = {}

--- The last explain result and its window (for tests and refreshes).
M.last = nil ---@type {result: table, buf: integer, win: integer}?

local ns = vim.api.nvim_create_namespace('contenox_explain')

--- Table lines and highlights for an explainContext result.
---@param r table
---@return string[] lines, {line: integer, col: integer, end_col: integer, group: string}[] hls
function M.format(r)
  local rows = {}
  for _, s in ipairs(r.segments or {}) do
    rows[#rows + 1] = { s.label or s.kind, s.kind, s.tokens, s.status, s.cacheClass or '' }
  end
  for _, d in ipairs(r.dropped or {}) do
    rows[#rows + 1] = { d.label or d.kind, d.kind, d.tokens, d.status or 'evicted', d.cacheClass or '' }
  end
  local w = 8
  for _, row in ipairs(rows) do
    w = math.max(w, vim.fn.strdisplaywidth(row[1]) + 1)
  end
  local lines, hls = {}, {}
  local function line(s)
    lines[#lines + 1] = s
  end
  line(('%s  (%s, n_ctx %s)'):format(r.profileId or '?', r.backend or '?', util.fmt_count(r.nCtx)))
  line('')
  line(('%-' .. w .. 's %-10s %8s  %-7s %s'):format('segment', 'kind', 'tokens', 'status', 'cache'))
  hls[#hls + 1] = { line = #lines - 1, col = 0, end_col = #lines[#lines], group = 'Title' }
  for _, row in ipairs(rows) do
    local label = row[1] .. string.rep(' ', w - vim.fn.strdisplaywidth(row[1]))
    local text = ('%s %-10s %8s  %-7s %s'):format(label, row[2], util.fmt_count(row[3]), row[4], row[5])
    line(text)
    local group = row[4] == 'cached' and 'DiagnosticOk' or (row[4] == 'new' and 'DiagnosticWarn' or 'Comment')
    local col = #label + 1 + 10 + 1 + 8 + 2
    hls[#hls + 1] = { line = #lines - 1, col = col, end_col = col + #row[4], group = group }
  end
  line('')
  line(('total %s tokens · %s cached · %s new'):format(
    util.fmt_count(r.totalTokens), util.fmt_count(r.reusedTokens), util.fmt_count(r.newTokens)))
  line(('resident %s · pending prefill %s'):format(
    util.fmt_count(r.residentTokens), util.fmt_count(r.pendingPrefillTokens)))
  if r.missReason and r.missReason ~= vim.NIL then
    line('first miss: ' .. tostring(r.missReason))
  end
  hls[#hls + 1] = { line = #lines - 1, col = 0, end_col = #lines[#lines], group = 'Comment' }
  return lines, hls
end

--- Ask the server and show the table; `cb(err, result)` when done (for scripts and tests).
---@param opts? {bufnr?: integer, cb?: fun(err: any, result: table?)}
function M.show(opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  local client = util.require_client(bufnr)
  if not client then
    return
  end
  local params = vim.empty_dict()
  local uri = util.buf_uri(bufnr)
  if uri then
    local win = vim.fn.bufwinid(bufnr)
    local pos = vim.lsp.util.make_position_params(win ~= -1 and win or 0, client.offset_encoding or 'utf-16')
    params = { textDocument = { uri = uri }, position = pos.position }
  end
  client:request('contenox/explainContext', params, function(err, result)
    if err then
      util.error('Explain Context failed: ' .. util.describe_error(err))
    else
      local lines, hls = M.format(result)
      if M.last and vim.api.nvim_win_is_valid(M.last.win) then
        vim.api.nvim_win_close(M.last.win, true)
      end
      local buf, win = util.float(lines, { title = 'Contenox: context', filetype = 'contenox-context' })
      for _, h in ipairs(hls) do
        vim.hl.range(buf, ns, h.group, { h.line, h.col }, { h.line, h.end_col })
      end
      vim.bo[buf].modifiable = false
      M.last = { result = result, buf = buf, win = win }
    end
    if opts.cb then
      opts.cb(err, result)
    end
  end, bufnr)
end

return M
