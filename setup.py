import shlex
from configparser import ConfigParser

import setuptools

# note: all settings are in settings.ini; edit there, not here
config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding="utf-8")
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o:cfg[o] for o in cfg_keys}

licenses = {'apache2': 'Apache-2.0'}  # SPDX expressions (license classifiers are deprecated in setuptools)
statuses = [ '0 - Pre-Planning', '1 - Planning', '2 - Pre-Alpha', '3 - Alpha',
    '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive' ]
py_versions = '3.9 3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
min_python = cfg['min_python']
lic = licenses.get(cfg['license'].lower(), cfg['license'])
demo_requirements = shlex.split(cfg.get('demo_requirements') or '')  # the digits demo's data ships inside scikit-learn
tensorboard_requirements = shlex.split(cfg.get('tensorboard_requirements') or '')  # ddp_nb.export.to_tensorboard
lightning_requirements = shlex.split(cfg.get('lightning_requirements') or '')  # ddp_nb.fabric, tutorial 25
docs_requirements = shlex.split(cfg.get('docs_requirements') or '')  # `make docs`: the site from nbs/ (Sphinx + myst-nb)
dev_requirements = shlex.split(cfg.get('dev_requirements') or '') + demo_requirements + tensorboard_requirements + lightning_requirements + docs_requirements
bench_requirements = shlex.split(cfg.get('bench_requirements') or '')  # peers the benchmarks compare with, never the package's

setuptools.setup(
    name = cfg['lib_name'],
    license = lic,
    classifiers = [
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'Natural Language :: ' + cfg['language'].title(),
        'Operating System :: POSIX :: Linux',
    ] + ['Programming Language :: Python :: '+o for o in py_versions[py_versions.index(min_python):]],
    url = cfg['git_url'],
    packages = setuptools.find_packages(include=['ddp_nb', 'ddp_nb.*']),
    include_package_data = True,
    install_requires = requirements,
    extras_require={ 'demo': demo_requirements, 'dev': dev_requirements, 'bench': bench_requirements, 'tensorboard': tensorboard_requirements, 'lightning': lightning_requirements, 'docs': docs_requirements },
    python_requires  = '>=' + cfg['min_python'],
    long_description = open('README.md', encoding="utf8").read(),
    long_description_content_type = 'text/markdown',
    zip_safe = False,
    entry_points = {
        'console_scripts': cfg.get('console_scripts','').split(),
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']
    },
    **setup_cfg)
