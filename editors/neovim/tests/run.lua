-- A tiny test runner for headless Neovim. Usage (from the repository root):
--   CONTENOX_TEST=editors/neovim/tests/test_contenox.lua \
--     nvim --headless -u editors/neovim/tests/minimal_init.lua -c "luafile editors/neovim/tests/run.lua"
-- Each test file calls the global `test(name, fn)`; tests run in order and stop at the first
-- failure only if the file sets `STOP_ON_FAILURE = true`. Exit code: 0 when all pass, 1 otherwise.
local file = vim.env.CONTENOX_TEST
local out = io.stdout

local function say(s)
  out:write(s .. '\n')
  out:flush()
end

if not file or file == '' then
  say('run.lua: set CONTENOX_TEST to a test file')
  vim.cmd('cquit 2')
  return
end

local cases = {}
_G.test = function(name, fn)
  cases[#cases + 1] = { name = name, fn = fn }
end

-- A hard limit for the whole file, in case something waits forever.
local limit_s = tonumber(vim.env.CONTENOX_TEST_TIMEOUT or '') or 600
local watchdog = assert(vim.uv.new_timer())
watchdog:start(limit_s * 1000, 0, function()
  out:write(('run.lua: %s did not finish within %d s\n'):format(file, limit_s))
  out:flush()
  os.exit(3)
end)

local ok_load, load_err = xpcall(function()
  dofile(file)
end, debug.traceback)
if not ok_load then
  say('run.lua: loading ' .. file .. ' failed:\n' .. load_err)
  vim.cmd('cquit 2')
  return
end

say(('# %s: %d tests'):format(vim.fn.fnamemodify(file, ':t'), #cases))
local failed = 0
for i, case in ipairs(cases) do
  local t0 = vim.uv.hrtime()
  local ok, err = xpcall(case.fn, debug.traceback)
  local ms = (vim.uv.hrtime() - t0) / 1e6
  if ok then
    say(('ok %d - %s (%.0f ms)'):format(i, case.name, ms))
  else
    failed = failed + 1
    say(('not ok %d - %s (%.0f ms)\n%s'):format(i, case.name, ms, tostring(err):gsub('^', '  ')))
    if _G.STOP_ON_FAILURE then
      break
    end
  end
end

if _G.after_all then
  local ok, err = xpcall(_G.after_all, debug.traceback)
  if not ok then
    say('after_all failed: ' .. tostring(err))
  end
end

-- Stop language servers cleanly before leaving.
local clients = vim.lsp.get_clients()
for _, c in ipairs(clients) do
  c:stop()
end
vim.wait(10000, function()
  return #vim.lsp.get_clients() == 0
end, 100)
for _, c in ipairs(vim.lsp.get_clients()) do
  c:stop(true)
end

say(('# pass %d, fail %d'):format(#cases - failed, failed))
watchdog:stop()
if failed > 0 then
  vim.cmd('cquit 1')
else
  vim.cmd('qall!')
end
