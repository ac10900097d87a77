-- Assertions and fixtures shared by the test files.
local H = {}

function H.eq(actual, expected, msg)
  if not vim.deep_equal(actual, expected) then
    error(('%sexpected %s, got %s'):format(msg and (msg .. ': ') or '', vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

function H.ok(cond, msg)
  if not cond then
    error(msg or 'assertion failed', 2)
  end
  return cond
end

function H.match(s, pattern, msg)
  if type(s) ~= 'string' or not s:find(pattern) then
    error(('%s%s does not match %q'):format(msg and (msg .. ': ') or '', vim.inspect(s), pattern), 2)
  end
end

--- vim.wait for `cond`, or fail with `what`.
function H.wait_for(cond, timeout_ms, what)
  local ok = vim.wait(timeout_ms, cond, 50)
  if not ok then
    error(('timed out after %d ms waiting for %s'):format(timeout_ms, what), 2)
  end
end

--- A temporary workspace (with a .git marker) holding two small Python files.
function H.make_workspace()
  local dir = vim.fn.resolve(vim.fn.tempname() .. '-contenox-nvim')
  vim.fn.mkdir(dir .. '/.git', 'p')
  vim.fn.writefile({
    'from util import clamp',
    '',
    '',
    'def add(a, b):',
    '    return a + b',
    '',
    '',
    'class Greeter:',
    '    def hello(self, name):',
    '        return "hi " + name',
    '',
    '',
    'def scaled(x):',
    '    return clamp(x * 2, 0, 10)',
  }, dir .. '/app.py')
  vim.fn.writefile({
    'def clamp(x, lo, hi):',
    '    """Clamp x into [lo, hi]."""',
    '    return max(lo, min(hi, x))',
  }, dir .. '/util.py')
  return dir
end

--- Capture vim.notify calls.
function H.capture_notify()
  local seen = {}
  vim.notify = function(msg, level)
    seen[#seen + 1] = { msg = msg, level = level or vim.log.levels.INFO }
  end
  return seen
end

function H.find(list, pred)
  for _, x in ipairs(list) do
    if pred(x) then
      return x
    end
  end
end

function H.buf_text(buf)
  return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
end

return H
