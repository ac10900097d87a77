-- The session state for the statusline (polled with contenox/status while a client runs)
-- and :ContenoxStatus.
local util = require('contenox.util')

local M = {}

--- The last contenox/status result (nil before the first answer).
M.last = nil ---@type table?
M.interval_ms = 2000

local timer = nil ---@type uv.uv_timer_t?
local inflight = false

local icons = { cold = '○', warming = '◐', warm = '●', busy = '◉', error = '✗' }

--- Request contenox/status once (non-blocking) and redraw the statusline.
---@param cb? fun(err: any, status: table?)
function M.refresh(cb)
  local client = util.client()
  if not client then
    M.last = nil
    if cb then
      cb('no client', nil)
    end
    return
  end
  if inflight and not cb then
    return
  end
  inflight = true
  client:request('contenox/status', util.empty(), function(err, result)
    inflight = false
    if not err then
      M.last = result
      vim.cmd('redrawstatus')
    end
    if cb then
      cb(err, result)
    end
  end)
end

function M.start()
  if timer or M.interval_ms <= 0 then
    return
  end
  timer = assert(vim.uv.new_timer())
  timer:start(0, M.interval_ms, vim.schedule_wrap(function()
    if not util.client() then
      M.stop()
      return
    end
    M.refresh()
  end))
end

function M.stop()
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
  M.last = nil
  inflight = false
end

--- A short statusline component: "Contenox ● warm 711 tok +53 · TTFT 412 ms", or '' when
--- no Contenox client runs.
---@return string
function M.statusline()
  if not util.client() then
    return ''
  end
  local s = M.last
  if not s then
    return 'Contenox …'
  end
  local parts = { ('Contenox %s %s %s tok'):format(icons[s.state] or '?', s.state, util.fmt_count(s.residentTokens)) }
  if type(s.pendingPrefillTokens) == 'number' and s.pendingPrefillTokens > 0 then
    parts[1] = parts[1] .. ' +' .. util.fmt_count(s.pendingPrefillTokens)
  end
  local last = s.lastRequest
  if type(last) == 'table' and type(last.ttftMs) == 'number' then
    parts[#parts + 1] = 'TTFT ' .. util.fmt_ms(last.ttftMs)
  end
  return table.concat(parts, ' · ')
end

--- Lines for :ContenoxStatus.
function M.format(s, pins)
  local function v(x)
    if x == nil or x == vim.NIL then
      return '-'
    end
    return tostring(x)
  end
  local lines = {
    'state            ' .. v(s.state) .. ((s.running and s.running ~= vim.NIL) and (' (' .. s.running .. ')') or ''),
    'model            ' .. v(s.model),
    'backend          ' .. v(s.backend),
    'profile          ' .. v(s.profileId),
    'resident tokens  ' .. util.fmt_count(s.residentTokens),
    'pending prefill  ' .. util.fmt_count(s.pendingPrefillTokens),
  }
  if type(s.lastRequest) == 'table' then
    lines[#lines + 1] = 'last request     ' .. util.metrics_line(s.lastRequest)
  end
  if type(s.index) == 'table' then
    lines[#lines + 1] = ('index            %s, %s files'):format(v(s.index.state), util.fmt_count(s.index.files))
  end
  if s.prefillOnIdle ~= nil then
    lines[#lines + 1] = ('idle pre-prefill %s, debounce %s ms'):format(s.prefillOnIdle and 'on' or 'off', v(s.debounceMs))
  end
  if pins then
    local names = {}
    for _, p in ipairs(pins) do
      names[#names + 1] = p.label .. (type(p.tokens) == 'number' and (' (' .. p.tokens .. ' tok)') or '')
    end
    lines[#lines + 1] = 'pins             ' .. (#names > 0 and table.concat(names, ', ') or 'none')
  end
  if s.error and s.error ~= vim.NIL then
    lines[#lines + 1] = 'error            ' .. tostring(s.error)
  end
  return lines
end

--- :ContenoxStatus — status and pins in a float.
---@param opts? {cb?: fun(err: any, status: table?)}
function M.show(opts)
  opts = opts or {}
  local client = util.require_client()
  if not client then
    return
  end
  client:request('contenox/status', util.empty(), function(err, s)
    if err then
      util.error('Status failed: ' .. util.describe_error(err))
      if opts.cb then
        opts.cb(err, nil)
      end
      return
    end
    M.last = s
    client:request('contenox/listPins', util.empty(), function(_, pins)
      local lines = M.format(s, pins and pins.pins or nil)
      local buf, win = util.float(lines, { title = 'Contenox: status' })
      vim.bo[buf].modifiable = false
      M.window = { buf = buf, win = win }
      if opts.cb then
        opts.cb(nil, s)
      end
    end)
  end)
end

return M
