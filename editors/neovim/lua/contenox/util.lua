local M = {}

M.name = 'contenox'

--- vim.notify with a "Contenox: " prefix.
function M.notify(msg, level)
  vim.notify('Contenox: ' .. msg, level or vim.log.levels.INFO, { title = 'Contenox' })
end

function M.error(msg)
  M.notify(msg, vim.log.levels.ERROR)
end

--- The Contenox client attached to `bufnr` (or any Contenox client), or nil.
---@param bufnr? integer
---@return vim.lsp.Client?
--- A debounced call: `d.schedule(ms, fn)` runs `fn` (on the main loop) after `ms` of quiet;
--- each call restarts the wait. `d.stop()` cancels it.
function M.debouncer()
  local timer = nil ---@type uv.uv_timer_t?
  local d = {}
  function d.schedule(ms, fn)
    if timer then
      timer:stop()
    else
      timer = assert(vim.uv.new_timer())
    end
    timer:start(ms, 0, vim.schedule_wrap(fn))
  end
  function d.stop()
    if timer then
      timer:stop()
    end
  end
  return d
end

--- One request in flight at a time: `slot.set(client, id)` once sent, `slot.done()` in its
--- handler, `slot.cancel()` to cancel it ($/cancelRequest).
function M.request_slot()
  local pending = nil ---@type { client: vim.lsp.Client, id: integer }?
  local slot = {}
  function slot.set(client, id)
    pending = { client = client, id = id }
  end
  function slot.done()
    pending = nil
  end
  function slot.cancel()
    if pending then
      pcall(pending.client.cancel_request, pending.client, pending.id)
      pending = nil
    end
  end
  return slot
end

--- Extmark `virt_lines` for the lines after the first of `lines`, in highlight `hl` (nil when
--- there is only one line).
function M.virt_lines(lines, hl)
  if #lines < 2 then
    return nil
  end
  local extra = {}
  for i = 2, #lines do
    extra[#extra + 1] = { { lines[i], hl } }
  end
  return extra
end

--- An expr mapping of `key` in `mode` that runs `fn` while `active()` (scheduled: an expr
--- mapping may not change the buffer itself) and otherwise does what `key` does.
function M.fallthrough_map(mode, key, active, fn, desc)
  vim.keymap.set(mode, key, function()
    if active() then
      vim.schedule(fn)
      return ''
    end
    return vim.api.nvim_replace_termcodes(key, true, false, true)
  end, { expr = true, replace_keycodes = false, desc = desc })
end

function M.client(bufnr)
  local clients = vim.lsp.get_clients({ name = M.name, bufnr = bufnr or 0 })
  if #clients == 0 then
    clients = vim.lsp.get_clients({ name = M.name })
  end
  return clients[1]
end

--- The client, or nil after telling the user why there is none.
---@param bufnr? integer
---@return vim.lsp.Client?
function M.require_client(bufnr)
  local client = M.client(bufnr)
  if client then
    return client
  end
  local why = require('contenox').start_error
  M.error(why or ('no language server attached. Open a file of a supported filetype inside a '
    .. 'workspace, check that `contenox-lsp` is installed, and see :checkhealth contenox and '
    .. ':LspInfo / :lua vim.cmd.edit(vim.lsp.log.get_filename()).'))
  return nil
end

--- A one-line, user-facing description of a request error (never a stack trace).
---@param err table|string
function M.describe_error(err)
  if type(err) ~= 'table' then
    return (tostring(err):gsub('\n.*', ''))
  end
  local msg = tostring(err.message or 'unknown error'):gsub('\n.*', '')
  if type(err.data) == 'table' and type(err.data.code) == 'string' then
    msg = msg .. ' [' .. err.data.code .. ']'
  end
  return msg
end

--- The buffer's URI, or nil for a buffer without a file.
function M.buf_uri(bufnr)
  bufnr = bufnr == 0 and vim.api.nvim_get_current_buf() or bufnr or vim.api.nvim_get_current_buf()
  if vim.bo[bufnr].buftype ~= '' or vim.api.nvim_buf_get_name(bufnr) == '' then
    return nil
  end
  return vim.uri_from_bufnr(bufnr)
end

--- Empty JSON object params (a Lua `{}` would encode as `[]`).
function M.empty()
  return vim.empty_dict()
end

function M.fmt_count(n)
  if type(n) ~= 'number' then
    return '-'
  end
  local s = tostring(math.floor(n + 0.5))
  local out = s:reverse():gsub('(%d%d%d)', '%1,'):reverse()
  return (out:gsub('^,', ''))
end

function M.fmt_ms(ms)
  if type(ms) ~= 'number' then
    return '-'
  end
  if ms >= 1000 then
    return string.format('%.2f s', ms / 1000)
  end
  return string.format('%d ms', math.floor(ms + 0.5))
end

function M.metrics_line(m)
  if type(m) ~= 'table' then
    return ''
  end
  local parts = {}
  local function add(fmt, v)
    if type(v) == 'number' then
      parts[#parts + 1] = fmt(v)
    end
  end
  add(function(v) return 'TTFT ' .. M.fmt_ms(v) end, m.ttftMs)
  add(function(v) return 'reused ' .. M.fmt_count(v) end, m.reusedTokens)
  add(function(v) return 'new ' .. M.fmt_count(v) end, m.newTokens)
  add(function(v) return M.fmt_count(v) .. ' tokens' end, m.decodeTokens)
  add(function(v) return string.format('%.1f tok/s', v) end, m.decodeTokensPerSecond)
  return table.concat(parts, ' · ')
end

--- A floating window in the middle of the editor.
---@param lines string[]
---@param opts {title?: string, filetype?: string, width?: integer, height?: integer, enter?: boolean}
---@return integer buf, integer win
function M.float(lines, opts)
  opts = opts or {}
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  if opts.filetype then
    vim.bo[buf].filetype = opts.filetype
  end
  local cols, rows = vim.o.columns, vim.o.lines
  local width = opts.width
  if not width then
    width = 40
    for _, l in ipairs(lines) do
      width = math.max(width, vim.fn.strdisplaywidth(l) + 2)
    end
  end
  width = math.max(20, math.min(width, cols - 4))
  local height = math.max(1, math.min(opts.height or #lines, rows - 4))
  local win = vim.api.nvim_open_win(buf, opts.enter ~= false, {
    relative = 'editor',
    width = width,
    height = height,
    row = math.floor((rows - height) / 2) - 1,
    col = math.floor((cols - width) / 2),
    style = 'minimal',
    border = 'rounded',
    title = opts.title and (' ' .. opts.title .. ' ') or nil,
    title_pos = 'center',
  })
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  for _, lhs in ipairs({ 'q', '<Esc>' }) do
    vim.keymap.set('n', lhs, function()
      if vim.api.nvim_win_is_valid(win) then
        vim.api.nvim_win_close(win, true)
      end
    end, { buffer = buf, nowait = true, desc = 'Close' })
  end
  return buf, win
end

return M
